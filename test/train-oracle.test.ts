/**
 * The native trainer against the PyTorch training reference (test/oracles/torch_train_ref.py: float64,
 * sequences one at a time, full logits, autograd) on random tiny qwen3 / qwen2 / llama folders with a random
 * PEFT adapter (A and B non-zero, so every LoRA tensor has a gradient):
 *   - every loss kind (grpo, dapo, dr_grpo, cispo, gspo, sft), with and without the KL term and old logprobs,
 *     packed into one micro-batch or split into many, with and without per-layer activation recompute;
 *   - sequences at sampling temperatures ≠ 1 whose tokens are renormalised over allowed sets (constrained
 *     decoding), with the KL term (its reference at the same temperature and masks);
 *   - loss and metrics: |Δ| ≤ 1e-4 × max(1, |reference|) (loss, policy loss, KL, mean ratio, entropy);
 *     clip fraction within one token;
 *   - gradients: for EVERY LoRA tensor, max |g_engine − g_torch| ≤ 1e-3 × max |g_torch| (relative error of the
 *     tensor as a whole);
 *   - one optimiser step (grad-norm clipping + AdamW with weight decay) against torch.nn.utils.clip_grad_norm_
 *     + torch.optim.AdamW (eps 1e-4, see below): every weight within 1e-3 × lr of torch's.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, makeRng, type Arch, type RandomModelOptions } from '../scripts/random-model.js';
import { Model } from '../src/engine/model.js';
import { Trainer, type LossConfig, type TrainSequence } from '../src/engine/trainer.js';
import { requireOracle } from './helpers/oracles.js';
import { maskOf, perturbedOld, randomSequences, readF32Tensors, tensorRelErrors, torchTrainRef, type TorchTrainRequest } from './train-helpers.js';

const VOCAB = 512;
const GRAD_REL_TOL = 1e-3;
const LOSS_TOL = 1e-4;

interface Case { name: string; loss: LossConfig; old: boolean; microBatchTokens: number; recompute?: boolean; sampler?: boolean }
const CASES: Case[] = [
  { name: 'grpo + KL, packed', loss: { kind: 'grpo', beta: 0.05 }, old: true, microBatchTokens: 4096 },
  { name: 'grpo, no old logprobs (ratio 1), split', loss: { kind: 'grpo' }, old: false, microBatchTokens: 24 },
  { name: 'dapo + KL, split', loss: { kind: 'dapo', beta: 0.1 }, old: true, microBatchTokens: 40 },
  { name: 'dr_grpo, packed', loss: { kind: 'dr_grpo', maxLength: 40 }, old: true, microBatchTokens: 4096 },
  { name: 'cispo + KL, split', loss: { kind: 'cispo', beta: 0.05, cispoEpsMax: 1.1 }, old: true, microBatchTokens: 30 },
  { name: 'gspo + KL, packed', loss: { kind: 'gspo', clipEpsilon: 0.05, beta: 0.02 }, old: true, microBatchTokens: 4096 },
  { name: 'sft, split', loss: { kind: 'sft' }, old: false, microBatchTokens: 20 },
  { name: 'grpo + KL, packed, per-layer recompute', loss: { kind: 'grpo', beta: 0.05 }, old: true, microBatchTokens: 4096, recompute: true },
  { name: 'dapo + KL, tempered and masked, split', loss: { kind: 'dapo', beta: 0.05 }, old: true, microBatchTokens: 40, sampler: true },
  { name: 'grpo, tempered and masked, packed, per-layer recompute', loss: { kind: 'grpo' }, old: true, microBatchTokens: 4096, recompute: true, sampler: true },
];

/**
 * The sampler's view of the sequences: temperatures 0.7, 1.3, 0.5, 1 (one each) and, on every third loss token,
 * an allowed set of 40 seeded tokens plus the token itself.
 */
function samplerView(base: TrainSequence[]): TrainSequence[] {
  const rng = makeRng(23);
  const temps = [0.7, 1.3, 0.5, 1];
  // Position 6's mask is one object for every sequence, so it allows each sequence's token there.
  const sharedIds = new Set<number>(base.map((s) => s.tokenIds[6]));
  while (sharedIds.size < 41) sharedIds.add(Math.floor(rng.uniform() * VOCAB));
  const shared = maskOf(VOCAB, sharedIds);
  return base.map((s, i) => {
    const tokenMasks = s.tokenIds.map((tok, t) => {
      if (!s.mask[t] || t % 3 !== 0) return null;
      if (t === 6) return shared;
      const ids = new Set<number>([tok]);
      while (ids.size < 41) ids.add(Math.floor(rng.uniform() * VOCAB));
      return maskOf(VOCAB, ids);
    });
    return { ...s, temperature: temps[i % temps.length], tokenMasks };
  });
}

const ARCHS: { arch: Arch; model: Partial<RandomModelOptions>; rslora: boolean }[] = [
  { arch: 'qwen3', model: {}, rslora: false },
  { arch: 'qwen2', model: { tieWordEmbeddings: false }, rslora: true },
  { arch: 'llama', model: {}, rslora: false },
];

let scratch: string;
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'mcprl-train-oracle-'));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

describe.each(ARCHS)('trainer vs PyTorch on a random $arch model', ({ arch, model: shape, rslora }) => {
  it('matches loss, metrics and every LoRA gradient for each loss kind, and one AdamW step', async (ctx) => {
    requireOracle('torch', ctx);
    const opts: RandomModelOptions = { arch, vocabSize: VOCAB, tokenizer: false, seed: 11, ...shape };
    const modelDir = join(scratch, `${arch}-model`);
    const adapterDir = join(scratch, `${arch}-adapter`);
    await makeRandomModel(modelDir, opts);
    await makeRandomAdapter(adapterDir, opts, { rank: 4, alpha: 8, useRslora: rslora, seed: 5 });
    const model = await Model.load(modelDir, { threads: 2 });
    try {
      const trainer = await Trainer.resume(model, adapterDir, { adapterName: 'policy', optimizer: { lr: 1e-2, eps: 1e-4, weightDecay: 0.1, maxGradNorm: 0.05 } });
      const base = randomSequences(3, VOCAB, [17, 9, 26, 12], { advantages: [1.0, -0.6, 0.35, -1.2] });
      const current = await model.score(base.map((s) => s.tokenIds), { adapter: 'policy' });
      // Noise of 0.3 nats: ratios from ~0.5 to ~2, so both sides of every clip range are exercised.
      const old = perturbedOld(7, current, 0.3);
      // The sampler view's old logprobs: its own current ones (tempered, masked) plus the same kind of noise.
      const sampled = samplerView(base);
      const compact = (await trainer.gradientsWithMetrics(sampled, { kind: 'sft' })).logprobs;
      let j = 0;
      const currentSampled = sampled.map((s) => Float32Array.from(s.tokenIds, (_, t) => (s.mask[t] ? compact[j++] : 0)));
      const oldSampled = perturbedOld(8, currentSampled, 0.3);
      const seqsFor = (c: Case): TrainSequence[] =>
        (c.sampler ? sampled : base).map((s, i) => (c.old ? { ...s, oldLogprobs: (c.sampler ? oldSampled : old)[i] } : { ...s }));

      const requests: TorchTrainRequest[] = CASES.map((c, i) => ({
        model: modelDir, adapter: adapterDir, sequences: seqsFor(c), loss: c.loss, grads_out: join(scratch, `${arch}-g${i}.safetensors`),
      }));
      // The optimiser step is checked on the first case.
      const opt = { lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-4, weightDecay: 0.1, maxGradNorm: 0.05 };
      requests.push({ ...requests[0], grads_out: join(scratch, `${arch}-gopt.safetensors`), optimizer: opt, params_out: join(scratch, `${arch}-p1.safetensors`) });
      const refs = await torchTrainRef(requests);

      for (const [i, c] of CASES.entries()) {
        const { grads, metrics } = await trainer.gradientsWithMetrics(seqsFor(c), c.loss, { microBatchTokens: c.microBatchTokens, recompute: c.recompute });
        const ref = refs[i];
        const close = (got: number, want: number, what: string) =>
          expect(Math.abs(got - want), `${arch} ${c.name}: ${what} ${got} vs ${want}`).toBeLessThanOrEqual(LOSS_TOL * Math.max(1, Math.abs(want)));
        close(metrics.loss, ref.loss, 'loss');
        close(metrics.policyLoss, ref.policyLoss, 'policy loss');
        close(metrics.kl, ref.kl, 'kl');
        close(metrics.meanRatio, ref.meanRatio, 'mean ratio');
        close(metrics.entropy!, ref.entropy, 'entropy');
        expect(metrics.trainedTokens).toBe(ref.trainedTokens);
        expect(Math.abs(metrics.clipFraction - ref.clipFraction)).toBeLessThanOrEqual(1.01 / ref.trainedTokens);
        const { worst, key } = tensorRelErrors(grads, await readF32Tensors(requests[i].grads_out!));
        expect(worst, `${arch} ${c.name}: worst tensor ${key}`).toBeLessThanOrEqual(GRAD_REL_TOL);
        // Not vacuous: the KL and clipping paths were really taken where the case asks for them.
        if (c.loss.beta) expect(metrics.kl).toBeGreaterThan(0);
      }
      // At least one case clipped some tokens and one did not clip all of them.
      expect(refs.slice(0, CASES.length).some((r) => r.clipFraction > 0 && r.clipFraction < 1)).toBe(true);

      // One optimiser step: clip to 0.05 (the raw norm is larger, so clipping is active) + AdamW with decay.
      // eps = 1e-4 keeps Adam's first step g / (|g| + eps) away from the sign function, whose value for
      // near-zero gradient entries would amplify f32 rounding (1e-6 relative) into a large weight difference.
      const step = await trainer.trainStep(seqsFor(CASES[0]), CASES[0].loss);
      const ref = refs[CASES.length];
      expect(ref.gradNorm!).toBeGreaterThan(opt.maxGradNorm);
      expect(Math.abs(step.gradNorm - ref.gradNorm!)).toBeLessThanOrEqual(1e-4 * ref.gradNorm!);
      const want = await readF32Tensors(requests[CASES.length].params_out!);
      const got = new Map([...(await trainer.weights())].map(([k, t]) => [k, t.data]));
      let maxDiff = 0;
      for (const [k, w] of want) {
        const g = got.get(k)!;
        for (let j = 0; j < w.length; j++) maxDiff = Math.max(maxDiff, Math.abs(g[j] - w[j]));
      }
      expect(maxDiff).toBeLessThanOrEqual(1e-3 * opt.lr);
    } finally {
      model.close();
    }
  });
});
