/**
 * onnxruntime-node on the ONNX export of the same ~50M-parameter random Qwen3 model as bench/engine.bench.ts
 * (BENCH_50M, seed 1, real 151,936-token vocabulary, f32): the yardstick for the engine's prefill.
 *
 * onnx.prefill.{128,512}tok.batch1: the graph exported with `logits: 'last'` (LM head on the last position
 *   only), i.e. the work of the engine's prefill (forward over the prompt, logits for the next token).
 * onnx.score.8x256tok: the full graph (logits for every position) on 8 sequences of 256 tokens, like
 *   engine.score.8x256tok (which also turns logits into logprobs; onnxruntime stops at the logits).
 * onnx.{prefill.*,score.*}.engine_over_ort: the engine (src/engine/model.ts) on the same folder, the same prompts
 *   and the same threads, timed right after onnxruntime on each shape: the ratio of their speeds (above 1: the
 *   engine is faster).
 * Best of 5 runs (3 for scoring) after one warm-up each. Threads: os.availableParallelism(), or MCPRL_BENCH_THREADS.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import * as ort from 'onnxruntime-node';
import { BENCH_50M, makeRandomModel, makeRng } from '../scripts/random-model.js';
import { Model } from '../src/engine/model.js';
import { exportOnnx } from '../src/export/onnx.js';
import type { Emit } from './run.js';

const feed = (ids: number[][]) => ({ input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.flat().map(BigInt)), [ids.length, ids[0].length]) });

/**
 * Best seconds of each of two runtimes: a warm-up (first-run allocations, kernel selection) then `reps` timed runs
 * of one, then the same of the other. Not interleaved run by run: each runtime's worker threads spin a while after a run, and
 * would take the cores from the other's next run.
 */
async function bestOfBoth(a: () => Promise<unknown>, b: () => Promise<unknown>, reps: number): Promise<[number, number]> {
  const best: [number, number] = [Infinity, Infinity];
  for (const [k, run] of [a, b].entries()) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    await run();
    for (let i = 0; i < reps; i++) {
      const t0 = performance.now();
      await run();
      best[k] = Math.min(best[k], (performance.now() - t0) / 1000);
    }
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

    const engine = await Model.load(modelDir, { threads, prefixCacheMib: 0 });
    try {
      const prefill = await ort.InferenceSession.create(last.file, options);
      for (const n of [128, 512]) {
        const ids = prompt(n);
        const [ortS, engineS] = await bestOfBoth(
          () => prefill.run(feed([ids])),
          () => engine.generate({ promptIds: ids, sampling: { maxTokens: 1, temperature: 0 } }),
          5,
        );
        emit(`onnx.prefill.${n}tok.batch1`, n / ortS, 'tok/s');
        emit(`onnx.prefill.${n}tok.batch1.engine_over_ort`, ortS / engineS, 'ratio');
      }
      await prefill.release();

      const score = await ort.InferenceSession.create(full.file, options);
      const seqs = Array.from({ length: 8 }, () => prompt(256));
      const [ortS, engineS] = await bestOfBoth(() => score.run(feed(seqs)), () => engine.score(seqs), 3);
      emit('onnx.score.8x256tok', (8 * 256) / ortS, 'tok/s');
      emit('onnx.score.8x256tok.engine_over_ort', ortS / engineS, 'ratio');
      await score.release();
    } finally {
      engine.close();
    }
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}
