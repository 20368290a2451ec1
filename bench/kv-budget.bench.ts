/**
 * Issue 42 §3: peak memory of a training step's gather on a random Qwen3-0.6B-shaped BF16 folder
 * (scripts/random-model.ts QWEN3_0_6B, ~1.2 GB on disk) with 64 rollouts in flight (8 groups × 8), each a prompt of
 * 192 tokens shared within its group and 16 generated tokens (one turn: enough to hold a cache per rollout; the
 * figure is the cache, not the decode). One child process per figure (bench/gather-rss.ts): peak RSS and the KV
 * cache's own peak (Model.kvCacheStats) under a 1 GiB budget, where the rollouts wait for room, and under a budget
 * that holds all 64 at once (what every gather did before the budget), run only when the memory available holds
 * three times its cache. Also the cache all 64 reserve at once, computed: 64 × 208 tokens × 224 KiB per token (f32
 * keys and values of 28 layers × 8 KV heads × 128). Slow on a shared two-core machine (minutes per figure).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { availableMemory } from '../src/engine/kv-cache.js';
import { QWEN3_0_6B, makeRandomModel } from '../scripts/random-model.js';
import type { Emit } from './run.js';

const here = dirname(fileURLToPath(import.meta.url));
const GROUPS = 8, PER_GROUP = 8, PROMPT = 192, TOKENS = 16;
const TOKEN_BYTES = 2 * 28 * 8 * 128 * 4;

interface Gather { maxRssMiB: number; peakKvBytes: number; peakSlots: number; seconds: number }

function gather(dir: string, kvMib: number): Gather {
  const args = [join(here, 'gather-rss.ts'), dir, kvMib, GROUPS, PER_GROUP, PROMPT, TOKENS].map(String);
  const out = execFileSync(process.execPath, ['--import', 'tsx', ...args], { encoding: 'utf8', maxBuffer: 1 << 20 });
  return JSON.parse(out.trim().split('\n').pop()!);
}

export default async function kvBudgetBench(emit: Emit): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mcprl-bench-kv-'));
  try {
    await makeRandomModel(dir, { ...QWEN3_0_6B, arch: 'qwen3', dtype: 'BF16', seed: 1, tokenizer: false, shards: 4 });
    const all = GROUPS * PER_GROUP * (PROMPT + TOKENS) * TOKEN_BYTES;
    emit('memory.gather_kv_all_at_once.qwen3_0.6b.64_in_flight', all / 2 ** 20, 'MiB');
    const bounded = gather(dir, 1024);
    emit('memory.gather_peak_rss.qwen3_0.6b.64_in_flight.kv_1024mib', bounded.maxRssMiB, 'MiB');
    emit('memory.gather_peak_kv.qwen3_0.6b.64_in_flight.kv_1024mib', bounded.peakKvBytes / 2 ** 20, 'MiB');
    emit('memory.gather_peak_sequences.qwen3_0.6b.64_in_flight.kv_1024mib', bounded.peakSlots, 'sequences');
    if (availableMemory() > 3 * (all + 2 ** 30)) {
      const unbounded = gather(dir, Math.ceil((all + 2 ** 30) / 2 ** 20));
      emit('memory.gather_peak_rss.qwen3_0.6b.64_in_flight.all_at_once', unbounded.maxRssMiB, 'MiB');
      emit('memory.gather_peak_kv.qwen3_0.6b.64_in_flight.all_at_once', unbounded.peakKvBytes / 2 ** 20, 'MiB');
      emit('memory.gather_peak_sequences.qwen3_0.6b.64_in_flight.all_at_once', unbounded.peakSlots, 'sequences');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
