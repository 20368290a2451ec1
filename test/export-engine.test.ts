/**
 * The ONNX export in onnxruntime-node as a second, independent oracle for the native engine's forward pass:
 * Model.score (base and with a loaded PEFT adapter) against the ONNX graph of the same folder (adapter merged
 * into the graph), and against the ONNX graph of the merged HF folder written by `mergeAdapter`.
 *
 * Tolerance: max |Δlogprob| ≤ 1e-4 over every position of every sequence; both sides compute in f32 with
 * different kernels and summation orders (measured about 1e-6).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, type RandomAdapterOptions, type RandomModelOptions } from '../scripts/random-model.js';
import { Model } from '../src/engine/model.js';
import { mergeAdapter } from '../src/export/merge.js';
import { exportOnnx } from '../src/export/onnx.js';
import { maxAbsDiff, ortRun, tokenIds } from './export-helpers.js';

const TOLERANCE = 1e-4;

const CASES: { name: string; model: RandomModelOptions; adapter: RandomAdapterOptions }[] = [
  { name: 'qwen3 f32 tied', model: { arch: 'qwen3', vocabSize: 4096, seed: 31 }, adapter: { seed: 32 } },
  { name: 'qwen2 f32 untied', model: { arch: 'qwen2', vocabSize: 4096, tieWordEmbeddings: false, seed: 33 }, adapter: { rank: 8, alpha: 16, useRslora: true, seed: 34 } },
  { name: 'llama bf16 sharded', model: { arch: 'llama', vocabSize: 4096, dtype: 'BF16', shards: 2, numHeads: 8, numKvHeads: 2, seed: 35 }, adapter: { targetModules: ['v_proj', 'o_proj', 'gate_proj'], seed: 36 } },
];
const SHAPES = [[3, 16], [1, 45]] as const;

let scratch: string;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'mcprl-export-engine-'));
});

afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

describe('native engine vs ONNX export in onnxruntime-node', () => {
  it.each(CASES.map((c, k) => [c.name, k] as const))('%s: Model.score matches ONNX, base and with adapter (≤ 1e-4)', async (_name, k) => {
    const c = CASES[k];
    const dir = (s: string) => join(scratch, `${k}-${s}`);
    await makeRandomModel(dir('model'), { ...c.model, tokenizer: false });
    await makeRandomAdapter(dir('adapter'), c.model, c.adapter);
    await mergeAdapter({ modelDir: dir('model'), adapterDir: dir('adapter'), out: dir('merged'), dtype: 'F32' });
    const graphs = {
      base: await exportOnnx({ modelDir: dir('model'), out: dir('onnx') }),
      adapter: await exportOnnx({ modelDir: dir('model'), adapterDir: dir('adapter'), out: dir('onnx-adapter') }),
      merged: await exportOnnx({ modelDir: dir('merged'), out: dir('onnx-merged') }),
    };
    const model = await Model.load(dir('model'), { threads: 1 });
    try {
      await model.loadAdapter('lora', dir('adapter'));
      for (const [j, [batch, seq]] of SHAPES.entries()) {
        const ids = tokenIds(batch, seq, c.model.vocabSize!, 1000 * k + j);
        const engineBase = (await model.score(ids)).map((r) => Array.from(r));
        const engineLora = (await model.score(ids, { adapter: 'lora' })).map((r) => Array.from(r));
        const onnx: Record<string, number[][]> = {};
        for (const [key, g] of Object.entries(graphs)) {
          const session = await ort.InferenceSession.create(g.file);
          onnx[key] = (await ortRun(session, ids)).logprobs;
          await session.release();
        }
        expect(maxAbsDiff(onnx.base, engineBase)).toBeLessThanOrEqual(TOLERANCE);
        expect(maxAbsDiff(onnx.adapter, engineLora)).toBeLessThanOrEqual(TOLERANCE);
        expect(maxAbsDiff(onnx.merged, engineLora)).toBeLessThanOrEqual(TOLERANCE);
        // The adapter moves the logprobs well past the tolerance, so the two checks above can fail.
        expect(maxAbsDiff(engineBase, engineLora)).toBeGreaterThan(100 * TOLERANCE);
      }
    } finally {
      model.close();
    }
  });
});
