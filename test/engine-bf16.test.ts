/**
 * bf16 base weights kept as bf16 in memory (native/core/weight.h, gemm_w in native/kernels/gemm.h) on a random Qwen3-shaped
 * BF16 folder, against the same weights widened to f32 at load (`weightDtype: 'f32'`, the oracle) and against
 * PyTorch (test/oracles: float64, the bf16 weights widened):
 *   - memory: `auto` keeps every matrix of a BF16 folder as bf16 (f32 bytes + bf16 bytes ≤ 0.55× the f32 load);
 *     `f32` keeps none; `bf16` on an F32 folder rounds every matrix to bf16;
 *   - scoring: max |Δlogprob| ≤ 1e-5 between bf16-in-memory and f32-widened (both GEMMs, ± LoRA; widening is
 *     exact, so only the order of the additions differs), ≤ 1e-4 against PyTorch;
 *   - decoding with bf16 weights is batch-invariant: bit-identical tokens and logprobs alone and in a batch;
 *   - LoRA training on the bf16 base: loss within 1e-4 and every LoRA gradient tensor within 1e-3 (relative to
 *     its largest entry) of PyTorch's;
 *   - with the real 151,936-token vocabulary, where the LM head is widened in several blocks (x Wᵀ by output
 *     columns, pᵀW accumulated over vocabulary blocks): scores within 1e-5 and LoRA gradients within 1e-5
 *     (relative) of the f32-widened load.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, makeRng, type RandomModelOptions } from '../scripts/random-model.js';
import { Model, type GenerateRequest } from '../src/engine/model.js';
import { loadNative } from '../src/engine/native.js';
import { Trainer } from '../src/engine/trainer.js';
import { requireOracle } from './helpers/oracles.js';
import { torchLogprobs } from './oracles/torch-oracle.js';
import { perturbedOld, randomSequences, readF32Tensors, tensorRelErrors, torchTrainRef } from './train-helpers.js';

const VOCAB = 512;
const SAME_TOL = 1e-5;
const TORCH_TOL = 1e-4;
const opts: RandomModelOptions = { arch: 'qwen3', vocabSize: VOCAB, dtype: 'BF16', seed: 61, tokenizer: false };
const addon = loadNative();
let dir: string, modelDir: string, f32Dir: string, adapterDir: string;
let bf16: Model, f32: Model;

function sequences(seed: number): number[][] {
  const rng = makeRng(seed);
  return [1, 9, 40, 17].map((n) => Array.from({ length: n }, () => Math.floor(rng.uniform() * VOCAB)));
}

function maxDiff(a: ArrayLike<number>[], b: ArrayLike<number>[]): number {
  let m = 0;
  a.forEach((x, s) => {
    expect(x.length).toBe(b[s].length);
    for (let t = 0; t < x.length; t++) m = Math.max(m, Math.abs(x[t] - b[s][t]));
  });
  return m;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-bf16-'));
  modelDir = join(dir, 'model');
  f32Dir = join(dir, 'model-f32');
  adapterDir = join(dir, 'adapter');
  await makeRandomModel(modelDir, opts);
  await makeRandomModel(f32Dir, { ...opts, dtype: 'F32' });
  await makeRandomAdapter(adapterDir, opts, { rank: 4, alpha: 8, seed: 62 });
  bf16 = await Model.load(modelDir, { threads: 2 });
  f32 = await Model.load(modelDir, { threads: 2, weightDtype: 'f32' });
  for (const m of [bf16, f32]) await m.loadAdapter('lora', adapterDir);
}, 120_000);

afterAll(async () => {
  addon.setPortableGemm(false);
  bf16?.close();
  f32?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('bf16 weights kept as bf16 on CPU', () => {
  it('holds the matrices of a BF16 folder as bf16 (auto), none with f32, all with bf16 on an F32 folder', async () => {
    const b = bf16.weightBytes(), f = f32.weightBytes();
    expect(f.bf16).toBe(0);
    expect(f.f16).toBe(0);
    expect(b.bf16).toBeGreaterThan(0);
    expect(b.bf16 * 2 + b.f32).toBe(f.f32);
    expect((b.f32 + b.bf16) / f.f32).toBeLessThanOrEqual(0.55);
    const rounded = await Model.load(f32Dir, { threads: 2, weightDtype: 'bf16' });
    try {
      expect(rounded.weightBytes()).toEqual(b);
      const plain = await Model.load(f32Dir, { threads: 2 });
      try {
        expect(plain.weightBytes()).toEqual(f);
        // Rounding to bf16 changes the model, but only by bf16's precision.
        const d = maxDiff(await rounded.score(sequences(3)), await plain.score(sequences(3)));
        expect(d).toBeGreaterThan(0);
        expect(d).toBeLessThan(0.05);
      } finally {
        plain.close();
      }
    } finally {
      rounded.close();
    }
  });

  it(`scores within ${SAME_TOL} of the f32-widened weights, with both GEMMs, with and without LoRA`, async () => {
    const seqs = sequences(7);
    for (const portable of [false, true]) {
      addon.setPortableGemm(portable);
      for (const adapter of [null, 'lora']) {
        const d = maxDiff(await bf16.score(seqs, { adapter }), await f32.score(seqs, { adapter }));
        expect(d, `portable=${portable} adapter=${adapter}`).toBeLessThanOrEqual(SAME_TOL);
      }
    }
    addon.setPortableGemm(false);
  });

  it(`scores within ${TORCH_TOL} of PyTorch with the bf16 weights`, async (ctx) => {
    requireOracle('torch', ctx);
    const seqs = sequences(9);
    const [base, lora] = torchLogprobs([{ model: modelDir, adapter: null, sequences: seqs }, { model: modelDir, adapter: adapterDir, sequences: seqs }], dir);
    expect(maxDiff(await bf16.score(seqs, { adapter: null }), base)).toBeLessThanOrEqual(TORCH_TOL);
    expect(maxDiff(await bf16.score(seqs, { adapter: 'lora' }), lora)).toBeLessThanOrEqual(TORCH_TOL);
  });

  it('decodes batch-invariantly: bit-identical tokens and logprobs alone and in a decode batch of ten', async () => {
    const req = (k: number): GenerateRequest => ({ promptIds: [5, 9, 100 + k, 7 * k + 3], adapter: k % 2 ? 'lora' : null, sampling: { maxTokens: 10, temperature: 0.9, seed: 30 + k } });
    const together = await Promise.all(Array.from({ length: 10 }, (_, k) => bf16.generate(req(k))));
    for (const k of [0, 3, 9]) {
      const [alone] = await bf16.generate(req(k));
      expect(together[k][0].tokenIds).toEqual(alone.tokenIds);
      expect(together[k][0].logprobs).toEqual(alone.logprobs);
    }
    // And close to the f32-widened model's logprobs for the same tokens.
    const [g] = together[0];
    const seq = [5, 9, 100, 3, ...g.tokenIds];
    const [sf] = await f32.score([seq], { adapter: null });
    expect(maxDiff([Array.from(sf).slice(4)], [g.logprobs])).toBeLessThanOrEqual(SAME_TOL);
  });

  it('trains LoRA on the bf16 base: loss and every LoRA gradient match PyTorch', async (ctx) => {
    requireOracle('torch', ctx);
    const trainer = await Trainer.resume(bf16, adapterDir, { adapterName: 'policy', optimizer: { lr: 1e-2 } });
    const seqs = randomSequences(3, VOCAB, [17, 9, 26, 12], { advantages: [1.0, -0.6, 0.35, -1.2] });
    const current = await bf16.score(seqs.map((s) => s.tokenIds), { adapter: 'policy' });
    const old = perturbedOld(7, current, 0.3);
    const withOld = seqs.map((s, i) => ({ ...s, oldLogprobs: old[i] }));
    const loss = { kind: 'grpo' as const, beta: 0.05 };
    const gradsOut = join(dir, 'g.safetensors');
    const [ref] = await torchTrainRef([{ model: modelDir, adapter: adapterDir, sequences: withOld, loss, grads_out: gradsOut }]);
    const want = await readF32Tensors(gradsOut);
    // foldLora too: the bf16 matrices widened into W + scale · B A, the KL reference still on the bare base
    for (const foldLora of [false, true]) {
      const { grads, metrics } = await trainer.gradientsWithMetrics(withOld, loss, { microBatchTokens: 30, foldLora });
      expect(Math.abs(metrics.loss - ref.loss)).toBeLessThanOrEqual(1e-4 * Math.max(1, Math.abs(ref.loss)));
      const { worst, key } = tensorRelErrors(grads, want);
      expect(worst, `foldLora ${foldLora}: worst tensor ${key}`).toBeLessThanOrEqual(1e-3);
      expect(metrics.kl).toBeGreaterThan(0);
    }
  }, 120_000);

  it('with the real vocabulary (the LM head in several widened blocks): scores and LoRA gradients match f32', async () => {
    const big = join(dir, 'model-big');
    await makeRandomModel(big, { ...opts, vocabSize: undefined, seed: 71 });
    const [b16, b32] = [await Model.load(big, { threads: 2 }), await Model.load(big, { threads: 2, weightDtype: 'f32' })];
    try {
      expect(b16.weightBytes().bf16).toBeGreaterThan(151936 * 64 * 2 - 1);
      const rng = makeRng(13);
      const seqs = [30, 12].map((n) => Array.from({ length: n }, () => Math.floor(rng.uniform() * 151936)));
      expect(maxDiff(await b16.score(seqs, { adapter: null }), await b32.score(seqs, { adapter: null }))).toBeLessThanOrEqual(SAME_TOL);
      const batch = randomSequences(5, 151936, [20, 14], { advantages: [1, -1] });
      // A random adapter (B non-zero, so A has a gradient too).
      const bigAdapter = join(dir, 'adapter-big');
      await makeRandomAdapter(bigAdapter, { ...opts, vocabSize: undefined }, { rank: 4, alpha: 8, seed: 72 });
      const grads = [];
      for (const m of [b16, b32]) {
        const t = await Trainer.resume(m, bigAdapter, { adapterName: 'p', optimizer: { lr: 1e-3 } });
        grads.push(await t.computeGradients(batch, { kind: 'grpo' }));
        t.close();
      }
      const { worst, key } = tensorRelErrors(grads[0], grads[1]);
      expect(worst, `worst tensor ${key}`).toBeLessThanOrEqual(1e-5);
    } finally {
      b16.close();
      b32.close();
    }
  }, 120_000);
});
