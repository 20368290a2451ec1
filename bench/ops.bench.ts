/**
 * Single ops of the native engine, alone, single-threaded, in CPU time of the thread (best of reps): on a busy
 * machine these move less than the model-level wall-time figures.
 *
 * - attention (native/ops/attention.cc) forward and backward on one causal sequence of T = 512 and 2048 rows, in
 *   tokens (query rows) per second, at the BENCH_50M shape (8 heads / 4 kv heads, head_dim 32) and the
 *   Qwen3-0.6B shape (16 / 8, head_dim 128);
 * - the LM head + log-softmax (native/ops/lm_head.cc) forward (with the saved g) and backward on 256 rows against
 *   the real 151,936-token vocabulary at hidden 256 (BENCH_50M) and 1024 (Qwen3-0.6B), with the
 *   plain GEMMs of the same shapes: `ops.lm_head.fraction_of_gemm.*` = GEMM seconds / (forward + backward) seconds.
 */
import { loadNativeTesting } from '../src/engine/native-testing.js';
import type { Emit } from './run.js';

export default async function opsBench(emit: Emit): Promise<void> {
  const addon = loadNativeTesting();
  const shapes = [
    { name: 'bench50m', H: 8, Hkv: 4, D: 32 },
    { name: 'qwen3_0_6b', H: 16, Hkv: 8, D: 128 },
  ];
  for (const s of shapes)
    for (const T of [512, 2048]) {
      const r = await addon.attentionBench(T, s.H, s.Hkv, s.D, T > 1000 ? 3 : 5);
      emit(`ops.attention.forward.${s.name}.T${T}.1thread`, T / r.forward, 'tok/s');
      emit(`ops.attention.backward.${s.name}.T${T}.1thread`, T / r.backward, 'tok/s');
    }
  for (const C of [256, 1024]) {
    const N = 256, V = 151936;
    const r = await addon.lmHeadBench(N, C, V, 3);
    emit(`ops.lm_head.forward.C${C}.1thread`, N / r.forward, 'tok/s');
    emit(`ops.lm_head.backward.C${C}.1thread`, N / r.backward, 'tok/s');
    emit(`ops.lm_head.gemm.C${C}.1thread`, N / r.gemm, 'tok/s');
    emit(`ops.lm_head.fraction_of_gemm.C${C}.1thread`, r.gemm / (r.forward + r.backward), 'ratio');
  }
}
