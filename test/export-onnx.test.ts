/**
 * ONNX export against two independent parties: onnx's own checker (full_check, with shape inference) and the
 * project's PyTorch reference forward (test/oracles/torch_ref.py: float64, adapter applied unmerged).
 * The exported graph runs in onnxruntime-node at two sequence lengths on one session (dynamic shapes).
 *
 * Tolerance: max |Δlogprob| ≤ 1e-4 over every position of every sequence. The ONNX side computes in f32 and
 * the reference in f64, so the gap is f32 rounding (about 2e-6 here).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, type RandomAdapterOptions, type RandomModelOptions } from '../scripts/random-model.js';
import { exportOnnx, type OnnxExportResult } from '../src/export/onnx.js';
import { maxAbsDiff, onnxCheck, ortRun, tokenIds } from './export-helpers.js';
import { requireOracle } from './helpers/oracles.js';
import { torchLogprobs } from './oracles/torch-oracle.js';

const TOLERANCE = 1e-4;

interface Case {
  name: string;
  model: RandomModelOptions;
  adapter?: RandomAdapterOptions;
  externalData?: boolean;
}

const CASES: Case[] = [
  { name: 'qwen3 f32, tied, real 151936 vocabulary', model: { arch: 'qwen3' } },
  { name: 'qwen3 f32 + merged adapter (rslora, all seven modules)', model: { arch: 'qwen3', vocabSize: 4096, seed: 2 }, adapter: { rank: 8, alpha: 16, useRslora: true, seed: 5 } },
  { name: 'qwen2 f32 (qkv bias), untied + merged adapter on q/v', model: { arch: 'qwen2', vocabSize: 4096, tieWordEmbeddings: false, seed: 3 }, adapter: { targetModules: ['q_proj', 'v_proj'], seed: 6 } },
  { name: 'llama bf16 (llama3 rope scaling), tied, 3 shards', model: { arch: 'llama', vocabSize: 4096, dtype: 'BF16', shards: 3, seed: 4 } },
  { name: 'llama f32, untied, 8 query heads on 2 kv heads + merged adapter', model: { arch: 'llama', vocabSize: 4096, tieWordEmbeddings: false, numHeads: 8, numKvHeads: 2, seed: 7 }, adapter: { seed: 8 } },
  { name: 'qwen3 bf16 + merged adapter, weights as ONNX external data', model: { arch: 'qwen3', vocabSize: 4096, dtype: 'BF16', seed: 9 }, adapter: { seed: 10 }, externalData: true },
];

/** Batch 2 × 12 tokens, then batch 1 × 37 tokens on the same session: the graph must not bake in a length. */
const SHAPES = [[2, 12], [1, 37]] as const;

let scratch: string;
const exported = new Map<string, { result: OnnxExportResult; modelDir: string; adapterDir?: string; ids: number[][][] }>();
let checks: string[];
let lastOnly: OnnxExportResult;
let reference: number[][][];
let noAdapterReference: number[][][];

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'mcprl-export-onnx-'));
  for (const [k, c] of CASES.entries()) {
    const modelDir = join(scratch, `model-${k}`);
    await makeRandomModel(modelDir, { ...c.model, tokenizer: k === 0 });
    let adapterDir: string | undefined;
    if (c.adapter) {
      adapterDir = join(scratch, `adapter-${k}`);
      await makeRandomAdapter(adapterDir, c.model, c.adapter);
    }
    const result = await exportOnnx({ modelDir, adapterDir, out: join(scratch, `onnx-${k}`), externalData: c.externalData ?? false });
    const vocab = c.model.vocabSize ?? 151936;
    const ids = SHAPES.map(([b, s], j) => tokenIds(b, s, vocab, 100 * k + j + 1));
    exported.set(c.name, { result, modelDir, adapterDir, ids });
  }
  // The 'last position only' variant of the adapter case, checked against the full graph's last row.
  const c1 = exported.get(CASES[1].name)!;
  lastOnly = await exportOnnx({ modelDir: c1.modelDir, adapterDir: c1.adapterDir, out: join(scratch, 'onnx-last'), logits: 'last' });
  if (requireOracle('onnx')) checks = await onnxCheck([...[...exported.values()].map((e) => e.result.file), lastOnly.file]);
  if (!requireOracle('torch')) return;
  const jobs = [...exported.values()].map((e) => ({ model: e.modelDir, adapter: e.adapterDir ?? null, sequences: e.ids.flat() }));
  // The adapter cases once more without their adapter, to show the comparison can tell them apart.
  const adapterJobs = [...exported.values()].filter((e) => e.adapterDir).map((e) => ({ model: e.modelDir, adapter: null, sequences: e.ids.flat() }));
  const all = torchLogprobs([...jobs, ...adapterJobs], scratch);
  reference = all.slice(0, jobs.length);
  noAdapterReference = all.slice(jobs.length);
}, 120_000);

afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

describe('ONNX export', () => {
  it('passes onnx.checker.check_model(full_check=True) for every case', (ctx) => {
    requireOracle('onnx', ctx);
    expect(checks).toEqual([...CASES.map(() => ''), '']);
  });

  it('onnxruntime-node runs every case at both shapes on one session (dynamic batch and length)', async () => {
    for (const [k, c] of CASES.entries()) {
      const e = exported.get(c.name)!;
      const session = await ort.InferenceSession.create(e.result.file);
      for (const [j, ids] of e.ids.entries()) {
        const { dims, logprobs } = await ortRun(session, ids);
        expect(dims, c.name).toEqual([SHAPES[j][0], SHAPES[j][1], CASES[k].model.vocabSize ?? 151936]);
        expect(logprobs.flat().every((lp) => Number.isFinite(lp) && lp <= 0), c.name).toBe(true);
      }
      await session.release();
    }
  });

  it.for(CASES.map((c, k) => [c.name, k] as const))('%s: onnxruntime-node matches the PyTorch reference (≤ 1e-4)', async ([name, k], ctx) => {
    requireOracle('torch', ctx);
    const e = exported.get(name)!;
    expect(e.result.externalData).toBe(CASES[k].externalData ?? false);
    const session = await ort.InferenceSession.create(e.result.file);
    const vocab = CASES[k].model.vocabSize ?? 151936;
    let row = 0;
    for (const [j, ids] of e.ids.entries()) {
      const { dims, logprobs } = await ortRun(session, ids);
      expect(dims).toEqual([SHAPES[j][0], SHAPES[j][1], vocab]);
      expect(maxAbsDiff(logprobs, reference[k].slice(row, row + ids.length))).toBeLessThanOrEqual(TOLERANCE);
      row += ids.length;
    }
    await session.release();
  });

  it("logits: 'last' gives [batch, 1, vocab] equal to the last row of the full graph (≤ 1e-5)", async () => {
    const e = exported.get(CASES[1].name)!;
    const vocab = CASES[1].model.vocabSize!;
    const full = await ort.InferenceSession.create(e.result.file);
    const last = await ort.InferenceSession.create(lastOnly.file);
    for (const ids of e.ids) {
      const [batch, seq] = [ids.length, ids[0].length];
      const a = await ortRun(full, ids);
      const b = await ortRun(last, ids);
      expect(b.dims).toEqual([batch, 1, vocab]);
      const lastRows = Array.from({ length: batch }, (_, r) => a.logits.subarray(((r + 1) * seq - 1) * vocab, (r + 1) * seq * vocab));
      expect(maxAbsDiff(Array.from(b.logits), lastRows.flatMap((x) => Array.from(x)))).toBeLessThanOrEqual(1e-5);
    }
    await full.release();
    await last.release();
  });

  it('the comparison has teeth: each merged adapter moves logprobs far beyond the tolerance', async (ctx) => {
    requireOracle('torch', ctx);
    const withAdapter = CASES.map((c, k) => [c, k] as const).filter(([c]) => c.adapter);
    expect(withAdapter.length).toBe(noAdapterReference.length);
    for (const [i, [, k]] of withAdapter.entries()) {
      expect(maxAbsDiff(reference[k], noAdapterReference[i])).toBeGreaterThan(100 * TOLERANCE);
    }
  });
});
