/**
 * The contract between TypeScript and the native addon: native code has no defaults of its own, so every value
 * it reads must come from TypeScript. A missing field is a TypeError naming it, an integer out of range (or not an
 * integer) a RangeError naming it: 1e12 never wraps silently through an int cast. And the TypeScript side passes
 * every field, with the defaults that the zod schemas document.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomModel } from '../scripts/random-model.js';
import { engineOf, Model } from '../src/engine/model.js';
import { loadNative } from '../src/engine/native.js';
import { LossConfigSchema, OptimizerConfigSchema, lossParams } from '../src/engine/train-types.js';
import { readModelConfig, type ModelSpec } from '../src/hf/config.js';

const root = mkdtempSync(join(tmpdir(), 'mcprl-contract-'));
const dir = join(root, 'model');
const addon = loadNative() as ReturnType<typeof loadNative> & {
  Trainer: new (engine: unknown, name: string, r: number, alpha: number, rslora: boolean, targets: string[]) => {
    run(mbs: unknown[], loss: unknown, optim: unknown, wantLogprobs: unknown, recompute: unknown, foldLora?: unknown): Promise<unknown>;
  };
};
let spec: ModelSpec;
let model: Model;

beforeAll(async () => {
  await makeRandomModel(dir, { arch: 'qwen3', seed: 2, vocabSize: 256, tokenizer: false });
  spec = (await readModelConfig(dir)).spec;
  model = await Model.load(dir, { threads: 1 });
});
afterAll(() => {
  model.close();
  rmSync(root, { recursive: true, force: true });
});

describe('the native readers require every value and range-check integers', () => {
  it('Engine.load: a missing spec field, a wrong type, an integer out of range', () => {
    const e = new addon.Engine();
    const { rmsNormEps: _, ...noEps } = spec;
    expect(() => e.load(dir, noEps as ModelSpec, 1, 'auto', 'cpu')).toThrow(TypeError);
    expect(() => e.load(dir, noEps as ModelSpec, 1, 'auto', 'cpu')).toThrow('spec.rmsNormEps is required (a number)');
    expect(() => e.load(dir, { ...spec, qkNorm: 1 } as unknown as ModelSpec, 1, 'auto', 'cpu')).toThrow('spec.qkNorm must be a boolean, got a number');
    expect(() => e.load(dir, { ...spec, numLayers: 1e12 }, 1, 'auto', 'cpu')).toThrow(RangeError);
    expect(() => e.load(dir, { ...spec, numLayers: 1e12 }, 1, 'auto', 'cpu')).toThrow('spec.numLayers must be an integer in [1, 2147483647], got 1000000000000');
    expect(() => e.load(dir, { ...spec, headDim: 2.5 }, 1, 'auto', 'cpu')).toThrow('spec.headDim must be an integer');
    expect(() => e.load(dir, { ...spec, ropeScaling: { type: 'llama3', factor: 8 } } as ModelSpec, 1, 'auto', 'cpu')).toThrow('spec.ropeScaling.lowFreqFactor is required (a number)');
    expect(() => e.load(dir, spec, 1e12, 'auto', 'cpu')).toThrow('threads must be an integer in [0, 65536], got 1000000000000');
    expect(() => e.load(dir, spec, undefined as unknown as number, 'auto', 'cpu')).toThrow('threads is required (an integer)');
    expect(() => e.load(dir, spec, 1, 'f16' as 'auto', 'cpu')).toThrow("weightDtype must be 'auto', 'f32' or 'bf16', got 'f16'");
    expect(() => e.load(dir, spec, 1, undefined as unknown as 'auto', 'cpu')).toThrow('weightDtype is required');
    expect(() => e.load(dir, spec, 1, 'auto', 'gpu' as 'cpu')).toThrow("backend must be 'cpu', 'cpu-staged' or 'cuda', got 'gpu'");
  });

  it('Engine: KV slots and seeds', () => {
    const e = engineOf(model);
    expect(() => e.slotCreate(1e12)).toThrow('KV slot capacity must be an integer in [1, 2147483647], got 1000000000000');
    expect(() => e.slotCreate(0)).toThrow(RangeError);
    expect(() => e.slotSeed(1, 0.5, 0)).toThrow('seed must be an integer');
  });

  it('Trainer: rank, loss and optimiser fields', () => {
    const e = engineOf(model);
    expect(() => new addon.Trainer(e, 'big', 1e12, 8, false, ['q_proj'])).toThrow('Trainer r must be an integer in [1, 65536], got 1000000000000');
    expect(() => new addon.Trainer({}, 'x', 4, 8, false, ['q_proj'])).toThrow('expected an Engine');
    const t = new addon.Trainer(e, 'contract', 4, 8, false, ['q_proj']);
    model.registerAdapter('contract');
    const loss = { kind: 'grpo', epsLow: 0.2, epsHigh: 0.2, beta: 0, cispoEpsMax: 5 };
    const optim = { lr: 1e-3, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, step: 1 };
    const { epsHigh: _h, ...noEpsHigh } = loss;
    expect(() => t.run([], noEpsHigh, null, false, false)).toThrow('loss.epsHigh is required (a number)');
    const { weightDecay: _w, ...noDecay } = optim;
    expect(() => t.run([], loss, noDecay, false, false)).toThrow('optim.weightDecay is required (a number)');
    expect(() => t.run([], loss, { ...optim, step: 1e20 }, false, false)).toThrow(RangeError);
    expect(() => t.run([], loss, undefined, false, false)).toThrow('optim is required (an object)');
    expect(() => t.run([], loss, null, undefined, false, false)).toThrow('wantLogprobs is required (a boolean)');
    expect(() => t.run([], loss, null, false, false)).toThrow('foldLora is required (a boolean)');
    model.unloadAdapter('contract');
  });
});

describe('TypeScript passes every field, with the schemas\' defaults', () => {
  it('loss: clip 0.2 (dapo 0.28 above), β 0, CISPO cap 5', () => {
    expect(lossParams(LossConfigSchema.parse({ kind: 'grpo' }))).toEqual({ kind: 'grpo', epsLow: 0.2, epsHigh: 0.2, beta: 0, cispoEpsMax: 5 });
    expect(lossParams(LossConfigSchema.parse({ kind: 'dapo' }))).toEqual({ kind: 'dapo', epsLow: 0.2, epsHigh: 0.28, beta: 0, cispoEpsMax: 5 });
    expect(lossParams(LossConfigSchema.parse({ kind: 'cispo', clipEpsilon: 0.1, beta: 0.05 }))).toEqual({ kind: 'cispo', epsLow: 0.1, epsHigh: 0.1, beta: 0.05, cispoEpsMax: 5 });
  });

  it('optimiser: the step\'s lr, β1 0.9, β2 0.99, ε 1e-8, no decay, clip 1', () => {
    // The trainer sends the resolved settings as they are, with the step's number: every field the native side reads.
    expect(OptimizerConfigSchema.parse({ lr: 2e-4 })).toEqual({ lr: 2e-4, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 1 });
    expect(() => OptimizerConfigSchema.parse({})).toThrow();
  });

  it('the model spec holds every field the engine reads', () => {
    expect(Object.keys(spec).sort()).toEqual(['headDim', 'hiddenSize', 'intermediateSize', 'maxPositionEmbeddings', 'mlpBias', 'modelType', 'numHeads',
      'numKvHeads', 'numLayers', 'oBias', 'qkNorm', 'qkvBias', 'rmsNormEps', 'ropeScaling', 'ropeTheta', 'tieWordEmbeddings', 'vocabSize']);
  });
});
