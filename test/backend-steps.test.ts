/**
 * The step options `mcprl train` drives the library with, on a LocalBackend over the real engine and the tiny
 * model: the model kept in a folder of the caller's choosing (modelDir), several optimiser steps per call on
 * minibatches (updates), the learning-rate schedule, a step taken without signal (alwaysStep), the off-policy
 * measurement (tisCap), per-group advantages, and deleteCheckpoints with the caller's own best step. The games are
 * text conversations (tokenised by the chat template), so no rollout is needed.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalBackend, TrainableModel } from '../src/index.js';
import { TINY_MODEL } from './backend-helpers.js';

const PROMPT = 'Free cells: 1, 2, 3. Reply with one free cell number.';
const game = (reply: string, reward: number) => ({
  messages: [
    { role: 'user' as const, content: PROMPT },
    { role: 'assistant' as const, content: reply },
  ],
  reward,
});
const withSignal = () => ({ trajectories: [game('2', 1), game('x', 0), game('9', 0)] });
const withoutSignal = () => ({ trajectories: [game('1', 0.5), game('3', 0.5)] });

describe('LocalBackend step options', () => {
  let work: string;
  let folder: string;
  let backend: LocalBackend;
  let model: TrainableModel;
  const optimiserSteps = async (step: number) =>
    (JSON.parse(await readFile(join(folder, 'checkpoints', `step-${String(step).padStart(4, '0')}`, 'trainer_state.json'), 'utf8')) as { step: number }).step;
  const adapterBytes = (step: number) => readFile(join(folder, 'checkpoints', `step-${String(step).padStart(4, '0')}`, 'adapter_model.safetensors'));

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'mcprl-backend-steps-'));
    folder = join(work, 'my-run');
    backend = new LocalBackend({ dir: join(work, 'unused'), modelDir: () => folder });
    model = new TrainableModel({ project: 'steps', name: 'picker', baseModel: TINY_MODEL, lora: { rank: 4, alpha: 8, seed: 1 } });
    await model.register(backend);
  });
  afterAll(async () => {
    await backend?.close();
    await rm(work, { recursive: true, force: true });
  });

  it('keeps the model in modelDir', async () => {
    expect((await readdir(folder)).sort()).toEqual(['checkpoints', 'model.json']);
    expect(existsSync(join(work, 'unused'))).toBe(false);
  });

  it('takes `updates` optimiser steps in one step, one per minibatch of whole groups, and reports each group\'s advantages', async () => {
    const r = await model.train([withSignal(), withoutSignal(), withSignal()], { lr: 1e-2, updates: 2 });
    expect(r).toMatchObject({ step: 1, trained: true, groups: 3, droppedGroups: 1 });
    // Two groups with signal, two minibatches: the optimiser's count moved by two, the model's step by one.
    expect(await optimiserSteps(1)).toBe(2);
    // Group-relative advantages, normalised by the group's standard deviation (GRPO): rewards 1, 0, 0.
    const sd = Math.sqrt(2) / 3;
    expect(r.advantages).toHaveLength(3);
    expect(r.advantages[1]).toBeNull();
    for (const a of [r.advantages[0]!, r.advantages[2]!]) {
      expect(a).toHaveLength(3);
      [2 / 3 / (sd + 1e-6), -1 / 3 / (sd + 1e-6), -1 / 3 / (sd + 1e-6)].forEach((want, i) => expect(a[i]).toBeCloseTo(want, 9));
    }
    expect(r.lr).toBe(1e-2);
    for (const k of ['loss', 'meanRatio', 'tokensPerSecond', 'entropy'] as const) expect(Number.isFinite(r[k])).toBe(true);
  });

  it('follows the learning-rate schedule over the optimiser steps', async () => {
    // Linear warm-up: the optimiser step taken at count n uses lr · (n + 1) / warmupSteps (docs/training.md).
    const r = await model.train([withSignal()], { lr: 1e-2, lrSchedule: { kind: 'warmup', warmupSteps: 10 } });
    expect(r.step).toBe(2);
    expect(r.lr).toBeCloseTo((1e-2 * 3) / 10, 12);
    expect(await optimiserSteps(2)).toBe(3);
  });

  it('with alwaysStep, a step without signal moves the step and the optimiser\'s count, and checkpoints the same weights', async () => {
    const kept = await model.train([withoutSignal()], { lr: 1e-2 });
    expect(kept).toMatchObject({ step: 2, trained: false, droppedGroups: 1, advantages: [null] });
    const taken = await model.train([withoutSignal()], { lr: 1e-2, updates: 3, alwaysStep: true });
    expect(taken).toMatchObject({ step: 3, trained: false, sequences: 0 });
    expect(taken.loss).toBeUndefined();
    expect(model.step).toBe(3);
    expect(await optimiserSteps(3)).toBe(3 + 3);
    expect((await adapterBytes(3)).equals(await adapterBytes(2))).toBe(true);
    // No group at all is a step too.
    expect(await model.train([], { alwaysStep: true })).toMatchObject({ step: 4, trained: false, groups: 0 });
  });

  it('with tisCap, measures the sampler against the model: turns without sampler logprobs keep weight 1 and are counted', async () => {
    const r = await model.train([withSignal()], { lr: 1e-2, tisCap: 2 });
    expect(r.trained).toBe(true);
    expect(r.retokenizedTurns).toBe(3);
    expect(r.offPolicy).toEqual({ logprobMismatch: 0, logprobMismatchMax: 0, tisTruncated: 0, tisWeightDeviation: 0, tokensWithoutSamplerLogprob: r.trainedTokens });
    expect((await model.train([withSignal()], { lr: 1e-2 })).offPolicy).toBeUndefined();
  });

  it('deleteCheckpoints keeps the latest and the best step the caller names', async () => {
    const latest = model.step;
    const deleted = await model.deleteCheckpoints({ best: 1 });
    expect(deleted).toEqual(Array.from({ length: latest + 1 }, (_, i) => i).filter((s) => s !== 1 && s !== latest));
    expect((await model.checkpoints()).map((c) => c.step)).toEqual([1, latest]);
    // The step's records, one TrainResult per step, beside the checkpoints.
    const rows = (await readFile(join(folder, 'train-results.jsonl'), 'utf8')).trim().split('\n').map((l) => (JSON.parse(l) as { step: number }).step);
    expect(rows).toEqual(Array.from({ length: latest }, (_, i) => i + 1));
  });

  it('a call trains on its own schedule: an SFT step after a warm-up call takes its lr as given', async () => {
    const warm = await model.train([withSignal()], { lr: 1e-2, lrSchedule: { kind: 'warmup', warmupSteps: 100 } });
    expect(warm.lr).toBeLessThan(1e-2);
    const sft = await model.sft([{ messages: game('2', 1).messages }], { lr: 1e-2 });
    expect(sft.lr).toBe(1e-2);
  });
});
