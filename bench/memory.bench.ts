/**
 * Memory of the engine on a random Qwen3-0.6B-shaped BF16 folder (scripts/random-model.ts QWEN3_0_6B, ~1.2 GB on
 * disk): peak RSS of a process that loads it and scores one sequence (bench/load-rss.ts, one child process per
 * figure), with the matrices kept as bf16 (`weightDtype: 'auto'`, the default) and widened to f32 (`'f32'`), the
 * ratio of the two, and the baseline of a child that loads only the addon. The load drops the file's pages as it
 * copies each tensor (StFile::release), so the figure is the weights, not weights + page cache mapping.
 * Generating the folder takes a minute and 1.2 GB of /tmp; it is removed afterwards.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { QWEN3_0_6B, makeRandomModel } from '../scripts/random-model.js';
import type { Emit } from './run.js';

const here = dirname(fileURLToPath(import.meta.url));

function childRss(dir: string, dtype: string): { maxRssMiB: number; weightBytes: { f32: number; bf16: number } | null } {
  const out = execFileSync(process.execPath, ['--import', 'tsx', join(here, 'load-rss.ts'), dir, dtype], { encoding: 'utf8', maxBuffer: 1 << 20 });
  return JSON.parse(out.trim().split('\n').pop()!);
}

export default async function memoryBench(emit: Emit): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mcprl-bench-mem-'));
  try {
    await makeRandomModel(dir, { ...QWEN3_0_6B, arch: 'qwen3', dtype: 'BF16', seed: 1, tokenizer: false, shards: 4 });
    const base = childRss(dir, 'none');
    const bf16 = childRss(dir, 'auto');
    const f32 = childRss(dir, 'f32');
    emit('memory.baseline_peak_rss', base.maxRssMiB, 'MiB');
    emit('memory.weights.qwen3_0.6b.bf16', (bf16.weightBytes!.f32 + bf16.weightBytes!.bf16) / 2 ** 20, 'MiB');
    emit('memory.weights.qwen3_0.6b.f32', f32.weightBytes!.f32 / 2 ** 20, 'MiB');
    emit('memory.load_peak_rss.qwen3_0.6b.bf16', bf16.maxRssMiB, 'MiB');
    emit('memory.load_peak_rss.qwen3_0.6b.f32', f32.maxRssMiB, 'MiB');
    emit('memory.load_peak_rss.qwen3_0.6b.bf16_over_f32', bf16.maxRssMiB / f32.maxRssMiB, 'ratio');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
