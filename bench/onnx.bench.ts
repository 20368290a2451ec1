/**
 * Prefill throughput of onnxruntime-node on the ONNX export of the benchmark's ~50M-parameter random Qwen3
 * model (BENCH_50M, real 151936-token vocabulary, f32). This is the yardstick the native engine's prefill is
 * compared against (issue: "prefill at least as fast as onnxruntime-node on the same model").
 *
 * What is timed: one `session.run` on input_ids [1, seq], i.e. the whole forward including the LM head over
 * every position (the exported graph returns logits for all positions). Median of several runs after a warm-up.
 * Output: one JSON object per line, {name, value, unit}.
 * Run: node --import tsx bench/onnx.bench.ts   (MCPRL_BENCH_THREADS sets onnxruntime's intra-op threads;
 * default: onnxruntime's own default, one per physical core).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import * as ort from 'onnxruntime-node';
import { BENCH_50M, makeRandomModel } from '../scripts/random-model.js';
import { exportOnnx } from '../src/export/onnx.js';

const SEQ_LENGTHS = [128, 512];
const RUNS = 5;

function emit(name: string, value: number, unit: string): void {
  process.stdout.write(`${JSON.stringify({ name, value: Number(value.toPrecision(4)), unit })}\n`);
}

const scratch = await mkdtemp(join(tmpdir(), 'mcprl-bench-onnx-'));
try {
  const modelDir = join(scratch, 'model');
  await makeRandomModel(modelDir, { arch: 'qwen3', ...BENCH_50M, tokenizer: false });
  const t0 = performance.now();
  const { file, bytes } = await exportOnnx({ modelDir, out: join(scratch, 'onnx') });
  emit('onnx_export_seconds', (performance.now() - t0) / 1000, 's');
  emit('onnx_file_mib', bytes / 1024 ** 2, 'MiB');

  const threads = Number(process.env.MCPRL_BENCH_THREADS ?? 0);
  const session = await ort.InferenceSession.create(file, { graphOptimizationLevel: 'all', ...(threads > 0 ? { intraOpNumThreads: threads } : {}) });
  for (const seq of SEQ_LENGTHS) {
    const ids = new ort.Tensor('int64', BigInt64Array.from({ length: seq }, (_, i) => BigInt((i * 7919) % 151936)), [1, seq]);
    await session.run({ input_ids: ids }); // warm-up: first-run allocations and kernel selection
    const times: number[] = [];
    for (let r = 0; r < RUNS; r++) {
      const start = performance.now();
      await session.run({ input_ids: ids });
      times.push(performance.now() - start);
    }
    times.sort((a, b) => a - b);
    const median = times[Math.floor(times.length / 2)] / 1000;
    emit(`onnxruntime_prefill_tokens_per_s_bench50m_seq${seq}`, seq / median, 'tokens/s');
  }
  await session.release();
} finally {
  await rm(scratch, { recursive: true, force: true });
}
