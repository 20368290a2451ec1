/**
 * Finite differences for the composed model gradient: the loss of the whole model (embedding → every layer
 * → chunked LM head → loss) as a function of individual LoRA weights, against the analytic gradient of
 * computeGradients, on a random tiny qwen3 model (f32 engine).
 *
 * Central differences (L(w + h) − L(w − h)) / 2h with h = 1e-2 at the two largest-gradient entries of every
 * LoRA tensor (A and B of all seven projections in both layers). Tolerance: |fd − g| ≤ 2e-2 · |g| + 2e-5:
 * the loss is an f32 computation (relative rounding ~1e-6 of a loss of order 1, i.e. ~5e-5 / 2h after
 * differencing) and h² truncation is ~1e-4 relative for these smooth functions.
 * Plus the loss-weight rules of the batch packer (the learning-rate schedule is TypeScript: test/step-settings.test.ts).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, type RandomModelOptions } from '../scripts/random-model.js';
import { Model } from '../src/engine/model.js';
import { Trainer, packBatch, type LossConfig } from '../src/engine/trainer.js';
import { perturbedOld, randomSequences } from './train-helpers.js';

const VOCAB = 256;
const H = 1e-2;

let scratch: string;
let model: Model;
let adapterDir: string;
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'mcprl-train-fd-'));
  const opts: RandomModelOptions = { arch: 'qwen3', vocabSize: VOCAB, tokenizer: false, seed: 31 };
  await makeRandomModel(join(scratch, 'model'), opts);
  adapterDir = join(scratch, 'adapter');
  await makeRandomAdapter(adapterDir, opts, { rank: 2, alpha: 4, seed: 8, std: 0.2 });
  model = await Model.load(join(scratch, 'model'), { threads: 2 });
});
afterAll(async () => {
  model?.close();
  await rm(scratch, { recursive: true, force: true });
});

describe('composed model gradient vs finite differences', () => {
  for (const loss of [{ kind: 'sft' }, { kind: 'grpo', beta: 0.1 }] as LossConfig[]) {
    it(`${loss.kind}: two entries of every LoRA tensor`, async () => {
      const t = await Trainer.resume(model, adapterDir, { adapterName: `fd-${loss.kind}`, optimizer: { lr: 0 } });
      let batch = randomSequences(4, VOCAB, [11, 8], { advantages: [0.8, -0.5] });
      if (loss.kind !== 'sft') {
        const cur = await model.score(batch.map((s) => s.tokenIds), { adapter: t.adapterName });
        // Small perturbation: ratios near 1, inside the clip range, so the loss is smooth at this point.
        const old = perturbedOld(2, cur, 0.02);
        batch = batch.map((s, i) => ({ ...s, oldLogprobs: old[i] }));
      }
      const grads = await t.computeGradients(batch, loss);
      const weights = await t.weights();
      const lossAt = async (key: string, i: number, delta: number) => {
        const w = new Map([...weights].map(([k, m]) => [k, { shape: m.shape, data: m.data.slice() }]));
        w.get(key)!.data[i] += delta;
        await t.setWeights(w);
        return (await t.gradientsWithMetrics(batch, loss)).metrics.loss;
      };
      let checked = 0, worst = 0;
      for (const [key, g] of grads) {
        const order = Array.from(g.keys()).sort((a, b) => Math.abs(g[b]) - Math.abs(g[a])).slice(0, 2);
        for (const i of order) {
          const fd = ((await lossAt(key, i, H)) - (await lossAt(key, i, -H))) / (2 * H);
          const err = Math.abs(fd - g[i]);
          worst = Math.max(worst, err / (Math.abs(g[i]) + 1e-12));
          expect(err, `${key}[${i}]: fd ${fd} vs analytic ${g[i]}`).toBeLessThanOrEqual(2e-2 * Math.abs(g[i]) + 2e-5);
          checked++;
        }
      }
      expect(checked).toBe(2 * 2 * 7 * 2); // 2 layers × 7 modules × (A, B) × 2 entries
      t.close();
    });
  }
});

describe('per-layer activation recompute', () => {
  it('gives bit-identical gradients and metrics (same op sequence, rebuilt one layer at a time)', async () => {
    const t = await Trainer.resume(model, adapterDir, { adapterName: 'recompute', optimizer: { lr: 0 } });
    const batch = randomSequences(6, VOCAB, [13, 7, 21], { advantages: [1, -1, 0.3] });
    for (const loss of [{ kind: 'sft' }, { kind: 'dapo', beta: 0.1 }] as LossConfig[]) {
      const plain = await t.gradientsWithMetrics(batch, loss, { microBatchTokens: 30 });
      const rc = await t.gradientsWithMetrics(batch, loss, { microBatchTokens: 30, recompute: true });
      expect(rc.metrics.loss).toBe(plain.metrics.loss);
      for (const [k, g] of plain.grads) expect(Array.from(rc.grads.get(k)!), k).toEqual(Array.from(g));
    }
    t.close();
  });
});

describe('folded LoRA (foldLora: W + scale · B A, A and B graded through the dense gradient)', () => {
  // The same sums associated another way: agreement to f32 rounding, 1e-4 of each tensor's largest entry.
  const close = (a: Float32Array, b: Float32Array, what: string) => {
    const scale = Math.max(...Array.from(b, Math.abs));
    expect(scale, what).toBeGreaterThan(0);
    for (let i = 0; i < a.length; i++) expect(Math.abs(a[i] - b[i]), `${what}[${i}]`).toBeLessThanOrEqual(1e-4 * scale);
  };
  it('gives the gradients and metrics of the LoRA products, with and without recompute', async () => {
    const t = await Trainer.resume(model, adapterDir, { adapterName: 'fold', optimizer: { lr: 0 } });
    const batch = randomSequences(9, VOCAB, [13, 7, 21], { advantages: [1, -1, 0.3] });
    for (const loss of [{ kind: 'sft' }, { kind: 'dapo', beta: 0.1 }] as LossConfig[]) {
      const plain = await t.gradientsWithMetrics(batch, loss, { microBatchTokens: 30 });
      for (const recompute of [false, true]) {
        const folded = await t.gradientsWithMetrics(batch, loss, { microBatchTokens: 30, recompute, foldLora: true });
        expect(Math.abs(folded.metrics.loss - plain.metrics.loss)).toBeLessThanOrEqual(1e-5 * Math.abs(plain.metrics.loss));
        close(folded.logprobs, plain.logprobs, `${loss.kind} logprobs`);
        for (const [k, g] of plain.grads) close(folded.grads.get(k)!, g, `${loss.kind} ${k}`);
      }
    }
    t.close();
  });
  it('refolds after each step, and a forward never reads a fold of older weights', async () => {
    const batch = randomSequences(10, VOCAB, [12, 9]);
    const tokens = batch.map((s) => s.tokenIds);
    const score = async (adapter: string) => Float32Array.from((await model.score(tokens, { adapter })).flatMap((r) => Array.from(r)));
    const folded = await Trainer.resume(model, adapterDir, { adapterName: 'fold-steps', optimizer: { lr: 0.05 } });
    const plain = await Trainer.resume(model, adapterDir, { adapterName: 'plain-steps', optimizer: { lr: 0.05 } });
    const before = await score('fold-steps');
    for (let step = 0; step < 2; step++) {
      const a = await folded.sftStep(batch, { foldLora: true });
      const b = await plain.sftStep(batch);
      expect(Math.abs(a.loss - b.loss)).toBeLessThanOrEqual(1e-5 * b.loss);
    }
    // The fold of the last step's starting weights is stale now: scoring must read the stepped adapter.
    const after = await score('fold-steps');
    const want = await score('plain-steps');
    close(after, want, 'scores after two steps');
    expect(Math.max(...Array.from(after, (x, i) => Math.abs(x - before[i])))).toBeGreaterThan(1e-2);
    folded.close();
    plain.close();
  });
  it('never reaches a forward that fills a KV cache (generation reads the LoRA products, fold current or not)', async () => {
    const t = await Trainer.resume(model, adapterDir, { adapterName: 'fold-gen', optimizer: { lr: 0 } });
    const batch = randomSequences(11, VOCAB, [10, 14]);
    const gen = () => model.generate({ promptIds: batch[0].tokenIds, adapter: 'fold-gen', sampling: { maxTokens: 8, temperature: 0 } });
    await t.gradientsWithMetrics(batch, { kind: 'sft' });
    const plain = await gen();
    await t.gradientsWithMetrics(batch, { kind: 'sft' }, { foldLora: true });  // no step: the fold stays current
    const whileFolded = await gen();
    expect(whileFolded.map((g) => g.logprobs)).toEqual(plain.map((g) => g.logprobs));
    t.close();
  });
});

describe('loss weights (token-count-aware accumulation)', () => {
  const batch = randomSequences(1, VOCAB, [10, 20, 6], { prompt: 2 });
  const counts = batch.map((s) => s.mask.reduce((a, b) => a + b, 0));
  const N = counts.reduce((a, b) => a + b, 0);
  const weights = (loss: LossConfig, budget: number) => packBatch(batch, loss, budget).microBatches.flatMap((m) => Array.from(m.seqWeight));
  it('gives each sequence its normaliser whatever the micro-batch split', () => {
    for (const budget of [8, 30, 4096]) {
      expect(weights({ kind: 'grpo' }, budget)).toEqual(counts.map((n) => Math.fround(1 / (3 * n))));
      expect(weights({ kind: 'dapo' }, budget)).toEqual(counts.map(() => Math.fround(1 / N)));
      expect(weights({ kind: 'sft' }, budget)).toEqual(counts.map(() => Math.fround(1 / N)));
      expect(weights({ kind: 'dr_grpo', maxLength: 50 }, budget)).toEqual(counts.map(() => Math.fround(1 / (3 * 50))));
      expect(weights({ kind: 'gspo' }, budget)).toEqual(counts.map(() => Math.fround(1 / 3)));
    }
    expect(packBatch(batch, { kind: 'grpo' }, 8).microBatches.length).toBe(3);
    expect(packBatch(batch, { kind: 'grpo' }, 30).microBatches.map((m) => Array.from(m.cuSeqlens))).toEqual([[0, 10, 30], [0, 6]]);
  });
});
