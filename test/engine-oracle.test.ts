/**
 * Whole-model forward of the native engine against an independent PyTorch implementation
 * (test/oracles/torch_ref.py, float64, sequences one at a time, no transformers) on seeded random HF folders:
 * qwen3 / qwen2 / llama in f32, qwen3 in bf16, and a sharded f16 qwen3 with an untied head; each with and
 * without a LoRA adapter. The engine scores all sequences packed in one forward (attention must not cross
 * sequences) with f32 arithmetic.
 * Tolerance: max |Δ logprob| <= 1e-4 over every token, with the OpenBLAS and with the portable GEMM.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, makeRng, type RandomAdapterOptions, type RandomModelOptions } from '../scripts/random-model.js';
import { Model } from '../src/engine/model.js';
import { loadNative } from '../src/engine/native.js';
import { requireOracle } from './helpers/oracles.js';
import { torchLogprobs, type TorchJob } from './oracles/torch-oracle.js';

const TOL = 1e-4;

interface Case {
  name: string;
  model: RandomModelOptions;
  adapter: RandomAdapterOptions;
}

const CASES: Case[] = [
  { name: 'qwen3 f32 tied', model: { arch: 'qwen3', seed: 11 }, adapter: { seed: 12, rank: 4, alpha: 8 } },
  // The other cases use a smaller vocabulary so that the file stays fast on two shared cores.
  { name: 'qwen2 f32 untied (qkv bias)', model: { arch: 'qwen2', seed: 21, tieWordEmbeddings: false, vocabSize: 8192 }, adapter: { seed: 22, rank: 8, alpha: 16, useRslora: true, targetModules: ['q_proj', 'v_proj', 'o_proj', 'down_proj'] } },
  { name: 'llama f32 (llama3 rope scaling)', model: { arch: 'llama', seed: 31, vocabSize: 8192 }, adapter: { seed: 32, rank: 2, alpha: 4, targetModules: ['k_proj', 'gate_proj', 'up_proj'] } },
  { name: 'qwen3 bf16', model: { arch: 'qwen3', seed: 41, dtype: 'BF16', vocabSize: 8192 }, adapter: { seed: 42 } },
  { name: 'qwen3 f16 sharded untied', model: { arch: 'qwen3', seed: 51, dtype: 'F16', shards: 3, tieWordEmbeddings: false, vocabSize: 8192 }, adapter: { seed: 52, targetModules: ['q_proj', 'k_proj'] } },
];

// Lengths include 1 (nothing to score), and 90 > the llama config's original_max_position_embeddings (64).
function sequences(seed: number, vocab: number): number[][] {
  const rng = makeRng(seed);
  return [1, 7, 90, 23].map((n) => Array.from({ length: n }, () => Math.floor(rng.uniform() * vocab)));
}

describe('engine forward vs PyTorch (max |Δlogprob| <= 1e-4)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mcprl-oracle-'));
  const ref = new Map<string, number[][]>();
  const seqs = new Map<string, number[][]>();
  const addon = loadNative();

  beforeAll(async () => {
    if (!requireOracle('torch')) return;
    const jobs: TorchJob[] = [];
    const keys: string[] = [];
    for (const [i, c] of CASES.entries()) {
      const m = join(dir, `m${i}`), a = join(dir, `a${i}`);
      await makeRandomModel(m, { ...c.model, tokenizer: false });
      await makeRandomAdapter(a, c.model, c.adapter);
      seqs.set(c.name, sequences(100 + i, c.model.vocabSize ?? 151936));
      for (const ad of [null, a]) {
        jobs.push({ model: m, adapter: ad, sequences: seqs.get(c.name)! });
        keys.push(`${c.name}|${ad ? 'lora' : 'base'}`);
      }
    }
    const res = torchLogprobs(jobs, dir);
    keys.forEach((k, i) => ref.set(k, res[i]));
  }, 120_000);

  afterAll(() => {
    addon.setPortableGemm(false);
    rmSync(dir, { recursive: true, force: true });
  });

  const figures: string[] = [];
  afterAll(() => {
    if (figures.length > 0) console.log(`oracle max |Δlogprob|:\n  ${figures.join('\n  ')}`);
  });

  it.for(CASES.map((c, i) => [c.name, i] as const))('%s', async ([name, i], ctx) => {
    requireOracle('torch', ctx);
    const model = await Model.load(join(dir, `m${i}`), { threads: 2 });
    try {
      await model.loadAdapter('lora', join(dir, `a${i}`));
      for (const portable of [false, true]) {
        addon.setPortableGemm(portable);
        for (const adapter of [null, 'lora']) {
          const want = ref.get(`${name}|${adapter ? 'lora' : 'base'}`)!;
          const got = await model.score(seqs.get(name)!, { adapter });
          let max = 0;
          got.forEach((g, s) => {
            expect(g.length).toBe(want[s].length);
            expect(g[0]).toBe(0);
            for (let t = 0; t < g.length; t++) max = Math.max(max, Math.abs(g[t] - want[s][t]));
          });
          figures.push(`${name} ${adapter ? '+LoRA' : 'base '} ${portable ? 'portable' : 'default '} GEMM: ${max.toExponential(2)}`);
          expect(max, `${name} adapter=${adapter} portable=${portable}`).toBeLessThanOrEqual(TOL);
        }
      }
      // The adapter must actually change the logprobs (else the LoRA comparison proves nothing).
      const base = ref.get(`${name}|base`)!, lora = ref.get(`${name}|lora`)!;
      expect(Math.max(...base[2].map((v, t) => Math.abs(v - lora[2][t])))).toBeGreaterThan(1e-3);
    } finally {
      model.close();
    }
  });
});
