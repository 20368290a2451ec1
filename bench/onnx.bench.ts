/**
 * onnxruntime-node on the ONNX export of the same ~50M-parameter random Qwen3 model as bench/engine.bench.ts
 * (BENCH_50M, seed 1, real 151,936-token vocabulary, f32): the yardstick for the engine's prefill.
 *
 * onnx.prefill.{128,512}tok.batch1: the graph exported with `logits: 'last'` (LM head on the last position
 *   only), i.e. the work of the engine's prefill (forward over the prompt, logits for the next token).
 * onnx.score.8x256tok: the full graph (logits for every position) on 8 sequences of 256 tokens, like
 *   engine.score.8x256tok (which also turns logits into logprobs; onnxruntime stops at the logits).
 * Best of 3 runs after one warm-up, as the engine bench does. Threads: os.availableParallelism(), or
 * MCPRL_BENCH_THREADS.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import * as ort from 'onnxruntime-node';
import { BENCH_50M, makeRandomModel, makeRng } from '../scripts/random-model.js';
import { exportOnnx } from '../src/export/onnx.js';
import type { Emit } from './run.js';

async function bestOf(session: ort.InferenceSession, ids: number[][], reps = 3): Promise<number> {
  const feed = { input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.flat().map(BigInt)), [ids.length, ids[0].length]) };
  await session.run(feed); // warm-up: first-run allocations and kernel selection
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    await session.run(feed);
    best = Math.min(best, (performance.now() - t0) / 1000);
  }
  return best;
}

export default async function onnxBench(emit: Emit): Promise<void> {
  const scratch = await mkdtemp(join(tmpdir(), 'mcprl-bench-onnx-'));
  try {
    const modelDir = join(scratch, 'model');
    await makeRandomModel(modelDir, { arch: 'qwen3', ...BENCH_50M, seed: 1, tokenizer: false });
    const t0 = performance.now();
    const full = await exportOnnx({ modelDir, out: join(scratch, 'onnx') });
    emit('onnx.export', (performance.now() - t0) / 1000, 's');
    emit('onnx.file', full.bytes / 1024 ** 2, 'MiB');
    const last = await exportOnnx({ modelDir, out: join(scratch, 'onnx-last'), logits: 'last' });

    const threads = Number(process.env.MCPRL_BENCH_THREADS) || availableParallelism();
    emit('onnx.threads', threads, 'threads');
    const options: ort.InferenceSession.SessionOptions = { graphOptimizationLevel: 'all', intraOpNumThreads: threads };
    const rng = makeRng(7);
    const prompt = (n: number) => Array.from({ length: n }, () => Math.floor(rng.uniform() * 151936));

    const prefill = await ort.InferenceSession.create(last.file, options);
    for (const n of [128, 512]) emit(`onnx.prefill.${n}tok.batch1`, n / (await bestOf(prefill, [prompt(n)])), 'tok/s');
    await prefill.release();

    const score = await ort.InferenceSession.create(full.file, options);
    const seqs = Array.from({ length: 8 }, () => prompt(256));
    emit('onnx.score.8x256tok', (8 * 256) / (await bestOf(score, seqs, 2)), 'tok/s');
    await score.release();
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}
