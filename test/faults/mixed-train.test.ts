/**
 * Issue 42 §4: one `model.train(groups)` whose trajectories were partly recorded (sampled token ids and logprobs)
 * and partly not (text only) was refused ("oldLogprobs must be given for every sequence…"), though the docs say
 * unrecorded turns are rendered and counted. Each sequence now trains by the rule a batch of its kind alone
 * follows: the recorded ones against their sampled logprobs, the unrecorded ones against the policy before the
 * update (ratio 1). The real engine on the bundled tiny model, through a LocalBackend and its OpenAI endpoint.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Model } from '../../src/engine/model.js';
import type { TrainSequence } from '../../src/engine/train-types.js';
import { Trainer } from '../../src/engine/trainer.js';
import { LocalBackend, TrainableModel, TrajectoryRecorder, type TrajectoryInput } from '../../src/index.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
let dir: string;
let backend: LocalBackend;
let model: TrainableModel;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'mcprl-mixed-'));
  backend = new LocalBackend({ dir });
  model = new TrainableModel({ project: 'p', name: 'mixed', baseModel: MODEL, lora: { rank: 4, alpha: 8, seed: 1 } });
  await model.register(backend);
});
afterAll(async () => {
  await backend?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** One recorded answer of the model (seeded sampling at temperature 1), with its reward. */
async function recorded(seed: number, reward: number): Promise<TrajectoryInput> {
  const recorder = new TrajectoryRecorder();
  await model.openai({ fetch: recorder.fetch, maxRetries: 0 }).chat.completions.create({
    model: model.inferenceName,
    messages: [{ role: 'user', content: 'Which books by Ursula K. Le Guin are in stock?' }],
    temperature: 1,
    max_tokens: 24,
    seed,
  });
  return recorder.trajectory({ reward });
}

/** The same trajectory as text only: what an agent that kept no token ids (or another policy) hands in. */
function unrecorded(t: TrajectoryInput): TrajectoryInput {
  return { ...t, messages: t.messages.map(({ mcprl: _ids, ...m }) => m) as TrajectoryInput['messages'] };
}

describe('a train() call mixing recorded and unrecorded trajectories', () => {
  it('trains: recorded turns on their ids and logprobs, the others rendered, every ratio 1 before the update', async () => {
    const all = await Promise.all([0, 1, 2, 3].map((i) => recorded(10 + i, i % 2)));
    expect(all.every((t) => t.messages.some((m) => m.role === 'assistant' && (m.mcprl?.token_ids.length ?? 0) > 0))).toBe(true);
    // One group, half of it recorded: the mix is inside a group as well as inside the batch.
    const trajectories = all.map((t, i) => (i < 2 ? t : unrecorded(t)));
    const r = await model.train([{ trajectories }], { lr: 1e-3 }).catch((e: unknown) => e as Error);
    expect(r instanceof Error ? r.message : null, 'train() on the mix').toBeNull();
    if (r instanceof Error) return;
    expect(r.trained).toBe(true);
    expect(r.step).toBe(1);
    expect(r.sequences).toBe(4);
    expect(r.retokenizedTurns).toBe(2);
    expect(Number.isFinite(r.loss)).toBe(true);
    expect(r.gradNorm).toBeGreaterThan(0);
    // The recorded sequences were sampled by this very adapter, and the others' log π_old is its own before the
    // update: every token's ratio starts at 1 (to the engine's float rounding), and none is clipped.
    expect(Math.abs(r.meanRatio! - 1)).toBeLessThan(1e-3);
    expect(r.clipFraction).toBe(0);
    fault('train() on one group of 2 recorded and 2 unrecorded trajectories', 'one step trains on all 4; unrecorded turns rendered and counted, ratio 1',
      `trained step 1: 4 sequences, retokenizedTurns 2, meanRatio ${r.meanRatio!.toFixed(6)}, clipFraction 0`);
  }, 180_000);

  it('sft() on the same mix trains too (SFT reads no old logprobs)', async () => {
    const all = await Promise.all([0, 1].map((i) => recorded(20 + i, 0)));
    const trajectories = [all[0], unrecorded(all[1])].map(({ reward: _r, ...t }) => t);
    const r = await model.sft(trajectories, { lr: 1e-3 }).catch((e: unknown) => e as Error);
    expect(r instanceof Error ? r.message : null, 'sft() on the mix').toBeNull();
    if (r instanceof Error) return;
    expect(r.trained).toBe(true);
    expect(r.sequences).toBe(2);
    expect(r.retokenizedTurns).toBe(1);
    expect(Number.isFinite(r.loss)).toBe(true);
    fault('sft() on one recorded and one unrecorded trajectory', 'one SFT step on both', `trained step ${r.step}: 2 sequences, retokenizedTurns 1`);
  }, 180_000);

  it('each sequence follows its own kind\'s rule: the mix\'s gradient is the mean of each kind\'s batch alone', async () => {
    const m = await Model.load(MODEL);
    try {
      const t = await Trainer.create(m, { adapterName: 'g', rank: 4, alpha: 8, targets: ['q_proj', 'v_proj'], seed: 1, optimizer: { lr: 1e-2 } });
      const vocab = m.config.vocabSize;
      const seq = (k: number, advantage: number): TrainSequence => ({
        tokenIds: Array.from({ length: 24 }, (_, i) => (k * 131 + i * 17) % vocab),
        mask: Array.from({ length: 24 }, (_, i) => (i >= 8 ? 1 : 0)),
        advantage,
      });
      // One step first, so that the adapter's B is not zero and every LoRA matrix has a gradient.
      await t.trainStep([seq(3, 1), seq(4, -1)], { kind: 'grpo' });
      // A recorded sequence whose sampler was a little off this policy (ratio about 0.95, unclipped) …
      const a = seq(1, 1);
      const [lp] = await m.score([a.tokenIds], { adapter: 'g' });
      a.oldLogprobs = Array.from(lp, (x) => x + 0.05);
      // … and an unrecorded one.
      const b = seq(2, -0.5);
      const mixed = await t.computeGradients([a, b], { kind: 'grpo' }).catch((e: unknown) => e as Error);
      expect(mixed instanceof Error ? mixed.message : null, 'gradients of the mix').toBeNull();
      if (mixed instanceof Error) return;
      // grpo weighs each sequence 1/(G n): alone, each batch has G = 1, so the mix's gradient is their mean.
      const alone = [await t.computeGradients([a], { kind: 'grpo' }), await t.computeGradients([b], { kind: 'grpo' })];
      let worst = 0, scale = 0;
      for (const [key, g] of mixed) {
        const ga = alone[0].get(key)!, gb = alone[1].get(key)!;
        g.forEach((x, i) => {
          worst = Math.max(worst, Math.abs(x - (ga[i] + gb[i]) / 2));
          scale = Math.max(scale, Math.abs(x));
        });
      }
      expect(scale).toBeGreaterThan(0);
      expect(worst / scale).toBeLessThan(1e-4);
      fault('gradients of a batch of one recorded sequence (ratio ~0.95) and one unrecorded', 'each sequence by its own rule: the mean of the two batches alone',
        `max |difference| / max |gradient| = ${(worst / scale).toExponential(1)}`);
    } finally {
      m.close();
    }
  }, 180_000);
});
