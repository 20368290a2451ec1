/**
 * Trainer checkpoints: a new adapter's initialisation, the PEFT files written by save(), the adapter read back
 * by the PyTorch reference strictly by its PEFT key names (same per-token logprobs as the engine, ≤ 1e-4), and
 * bit-for-bit resume (save → Trainer.resume → steps gives exactly the losses and weights of an uninterrupted run),
 * and a step's learning rate taken from the schedule passed with it.
 */
import { readFile, mkdtemp, rm, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomModel, type RandomModelOptions } from '../scripts/random-model.js';
import { adapterLayout, modelDims } from '../src/hf/peft.js';
import { readModelConfig } from '../src/hf/config.js';
import { Model } from '../src/engine/model.js';
import { readSafetensors } from '../src/hf/safetensors.js';
import { Trainer, type OptimizerConfig } from '../src/engine/trainer.js';
import { learningRate, type LrSchedule } from '../src/train/step-settings.js';
import { requireOracle } from './helpers/oracles.js';
import { randomSequences, torchTrainRef } from './train-helpers.js';

const VOCAB = 400;
const OPTS: RandomModelOptions = { arch: 'qwen3', vocabSize: VOCAB, tokenizer: false, seed: 21 };
const TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];
const OPTIMIZER: OptimizerConfig = { lr: 5e-3, weightDecay: 0.01, maxGradNorm: 1.0 };
const SCHEDULE: LrSchedule = { kind: 'cosine', warmupSteps: 2, totalSteps: 6 };
/** A step's optimiser settings: OPTIMIZER at the schedule's learning rate for the trainer's next step. */
const at = (t: Trainer) => ({ optimizer: { ...OPTIMIZER, lr: learningRate(SCHEDULE, OPTIMIZER.lr, t.step) } });

let scratch: string;
let model: Model;
let modelDir: string;
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'mcprl-train-ckpt-'));
  modelDir = join(scratch, 'model');
  await makeRandomModel(modelDir, OPTS);
  model = await Model.load(modelDir, { threads: 2 });
});
afterAll(async () => {
  model?.close();
  await rm(scratch, { recursive: true, force: true });
});

const batch = randomSequences(9, VOCAB, [14, 22, 10, 18], { advantages: [1, -1, 0.5, -0.5] });

describe('new adapter', () => {
  it('starts with A kaiming-uniform (|a| ≤ 1/sqrt(in)), B zero, reproducibly from the seed', async () => {
    const t1 = await Trainer.create(model, { adapterName: 'init-1', rank: 4, alpha: 8, targets: TARGETS, seed: 3, optimizer: OPTIMIZER });
    const t2 = await Trainer.create(model, { adapterName: 'init-2', rank: 4, alpha: 8, targets: TARGETS, seed: 3, optimizer: OPTIMIZER });
    const t3 = await Trainer.create(model, { adapterName: 'init-3', rank: 4, alpha: 8, targets: TARGETS, seed: 4, optimizer: OPTIMIZER });
    const [w1, w2, w3] = [await t1.weights(), await t2.weights(), await t3.weights()];
    let sameSeedDiffers = false, otherSeedDiffers = false;
    for (const [k, t] of w1) {
      if (k.endsWith('lora_B.weight')) {
        expect(t.data.every((x) => x === 0), k).toBe(true);
        continue;
      }
      const bound = 1 / Math.sqrt(t.shape[1]);
      let maxAbs = 0;
      for (const x of t.data) maxAbs = Math.max(maxAbs, Math.abs(x));
      expect(maxAbs).toBeLessThanOrEqual(bound);
      expect(maxAbs).toBeGreaterThan(0.8 * bound); // really spread over the range, not tiny
      if (!t.data.every((x, i) => x === w2.get(k)!.data[i])) sameSeedDiffers = true;
      if (!t.data.every((x, i) => x === w3.get(k)!.data[i])) otherSeedDiffers = true;
    }
    expect(sameSeedDiffers).toBe(false);
    expect(otherSeedDiffers).toBe(true);
    // B = 0: the new adapter leaves the model's outputs unchanged.
    const ids = batch.map((s) => s.tokenIds);
    const [base, adapted] = [await model.score(ids), await model.score(ids, { adapter: 'init-1' })];
    for (let i = 0; i < ids.length; i++) expect(Array.from(adapted[i])).toEqual(Array.from(base[i]));
    for (const t of [t1, t2, t3]) t.close();
    expect(model.adapterNames()).not.toContain('init-1');
  });
});

describe('save', () => {
  // One adapter trained for three steps and saved; the engine's logprobs with it live are the reference.
  let t: Trainer;
  let dir: string;
  let engine: Float32Array[];
  const ids = batch.map((s) => s.tokenIds);
  beforeAll(async () => {
    t = await Trainer.create(model, { adapterName: 'saved', rank: 8, alpha: 16, targets: TARGETS, seed: 1, optimizer: OPTIMIZER });
    for (let i = 0; i < 3; i++) await t.trainStep(batch, { kind: 'grpo' }, at(t));
    dir = join(scratch, 'ckpt-saved');
    await t.save(dir);
    engine = await model.score(ids, { adapter: 'saved' });
  });
  afterAll(() => t?.close());

  it('writes a PEFT adapter (config, key names, shapes) that the engine reads back to identical logprobs', async () => {
    expect((await readdir(dir)).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors', 'optimizer.safetensors', 'trainer_state.json']);
    const cfg = JSON.parse(await readFile(join(dir, 'adapter_config.json'), 'utf8'));
    expect(cfg).toMatchObject({ peft_type: 'LORA', task_type: 'CAUSAL_LM', r: 8, lora_alpha: 16, use_rslora: false, target_modules: TARGETS, base_model_name_or_path: model.dir });
    const { tensors } = await readSafetensors(join(dir, 'adapter_model.safetensors'));
    const layout = adapterLayout(modelDims((await readModelConfig(modelDir)).spec), 8, TARGETS as never);
    expect([...tensors.keys()]).toEqual(layout.map((e) => e.key));
    expect(layout[0].key).toBe('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight');
    for (const e of layout) expect(tensors.get(e.key)!.shape, e.key).toEqual(e.shape);
    expect(tensors.get('base_model.model.model.layers.1.mlp.down_proj.lora_B.weight')!.shape).toEqual([64, 8]);
    // The trained adapter really differs from the base model (so the comparisons with it are not vacuous).
    const base = await model.score(ids);
    expect(Math.abs(base[1][5] - engine[1][5])).toBeGreaterThan(1e-4);
    await model.loadAdapter('reloaded', dir);
    const reloaded = await model.score(ids, { adapter: 'reloaded' });
    for (let i = 0; i < ids.length; i++) expect(Array.from(reloaded[i])).toEqual(Array.from(engine[i]));
    model.unloadAdapter('reloaded');
  });

  it('the saved adapter, loaded by PyTorch strictly by its PEFT key names, gives the engine\'s logprobs (≤ 1e-4)', async (ctx) => {
    requireOracle('torch', ctx);
    const [ref] = await torchTrainRef([{ model: modelDir, adapter: dir, sequences: batch, loss: null }]);
    let maxDiff = 0;
    for (let i = 0; i < ids.length; i++) for (let j = 1; j < ids[i].length; j++) maxDiff = Math.max(maxDiff, Math.abs(engine[i][j] - ref.logprobs[i][j]));
    expect(maxDiff).toBeLessThanOrEqual(1e-4);
  });
});

describe('resume', () => {
  it('continues bit-for-bit: the same losses and weights as an uninterrupted run', async () => {
    const create = (name: string) => Trainer.create(model, { adapterName: name, rank: 4, alpha: 8, targets: TARGETS, seed: 17, optimizer: OPTIMIZER });
    const steps = [
      () => batch,
      () => batch.slice(0, 2),
      () => batch.map((s) => ({ ...s, advantage: -(s.advantage ?? 0) })),
      () => batch.slice(1),
      () => batch,
    ];
    const straight = await create('straight');
    const lossesA: number[] = [];
    for (const b of steps) lossesA.push((await straight.trainStep(b(), { kind: 'dapo', beta: 0.01 }, at(straight))).loss);

    const first = await create('first-half');
    const lossesB: number[] = [];
    for (const b of steps.slice(0, 2)) lossesB.push((await first.trainStep(b(), { kind: 'dapo', beta: 0.01 }, at(first))).loss);
    const dir = join(scratch, 'ckpt-resume');
    await first.save(dir);
    first.close();
    const resumed = await Trainer.resume(model, dir, { adapterName: 'resumed' });
    expect(resumed.step).toBe(2);
    for (const b of steps.slice(2)) lossesB.push((await resumed.trainStep(b(), { kind: 'dapo', beta: 0.01 }, at(resumed))).loss);

    expect(lossesB).toEqual(lossesA);
    // Later steps really moved the weights (so identical losses are not a frozen model).
    expect(new Set(lossesA).size).toBe(lossesA.length);
    const [wa, wb] = [await straight.weights(), await resumed.weights()];
    for (const [k, t] of wa) expect(Buffer.from(wb.get(k)!.data.buffer).equals(Buffer.from(t.data.buffer)), k).toBe(true);
    straight.close();
    resumed.close();
  });
});

describe('schedule', () => {
  it("takes each step's rate from the schedule passed with the step, counting its own optimiser steps, across a resume", async () => {
    const byRate = await Trainer.create(model, { adapterName: 'by-rate', rank: 4, alpha: 8, targets: TARGETS, seed: 5 });
    const bySchedule = await Trainer.create(model, { adapterName: 'by-schedule', rank: 4, alpha: 8, targets: TARGETS, seed: 5 });
    const rates: number[] = [];
    const stepped: (number | undefined)[] = [];
    for (let i = 0; i < 3; i++) {
      await byRate.trainStep(batch, { kind: 'grpo' }, at(byRate));
      stepped.push((await bySchedule.trainStep(batch, { kind: 'grpo' }, { optimizer: OPTIMIZER, schedule: SCHEDULE })).lr);
      rates.push(learningRate(SCHEDULE, OPTIMIZER.lr, i));
    }
    expect(rates[0]).toBeLessThan(rates[1]);
    expect(stepped).toEqual(rates);
    // The same updates as the rates given one by one: the same weights.
    const [a, b] = [await byRate.weights(), await bySchedule.weights()];
    for (const [k, m] of a) expect(Array.from(b.get(k)!.data), k).toEqual(Array.from(m.data));
    // A resumed trainer goes on from its saved step count.
    const dir = join(scratch, 'by-schedule');
    await bySchedule.save(dir);
    const resumed = await Trainer.resume(model, dir, { adapterName: 'by-schedule-resumed' });
    expect((await resumed.trainStep(batch, { kind: 'grpo' }, { optimizer: OPTIMIZER, schedule: SCHEDULE })).lr).toBe(learningRate(SCHEDULE, OPTIMIZER.lr, 3));
    for (const t of [byRate, bySchedule, resumed]) t.close();
  });
});
