/**
 * Typed loader of the test and bench addon (build/Release/mcprl_native_test.node, built with the production addon
 * by native/build.cjs from native/testing/): the ops alone, their finite-difference checks and their timings, for
 * test/ and bench/ only; the engine never loads it. Its GEMM settings (setPortableGemm, info) are its own copy,
 * separate from the production addon's.
 */
import { createRequire } from 'node:module';
import { EngineError, findBuiltAddon, setThreadEnv } from './native.js';

export interface GradcheckRow {
  input: string;
  maxAbsErr: number;
  maxAbsGrad: number;
  checked: number;
}

/** 'portable-avx2': the portable kernel with its AVX2 tiles even where the CPU has AVX-512. */
export type GemmKernel = 'portable' | 'portable-avx2' | 'blas' | 'auto';
export type AttentionKernel = 'tiles' | 'reference';

export interface NativeTestAddon {
  /** Finite-difference check of one op's backward (native/testing/gradcheck.cc). */
  gradcheck(op: string, seed: number, eps: number, samples: number): GradcheckRow[];
  /** C (M, N) = op(A) op(B), row-major, with the chosen kernel. */
  gemm(transA: boolean, transB: boolean, M: number, N: number, K: number, A: Float32Array, B: Float32Array, kernel: GemmKernel, threads?: number): Float32Array;
  /** GFLOP/s of an n^3 sgemm, best of reps. */
  gemmBench(n: number, kernel: 'portable' | 'blas', reps: number, threads?: number): Promise<number>;
  /**
   * The attention op alone (native/ops/attention.h), 'tiles' (the engine's kernel) or 'reference' (one row at a
   * time in double precision). segments: (q0, nq, npast, kRow0) per segment; segment s reads k/v rows
   * kRow0 .. kRow0 + npast + nq. threads: all cores when left out.
   */
  attention(q: Float32Array, k: Float32Array, v: Float32Array, H: number, Hkv: number, D: number, segments: Int32Array, kernel: AttentionKernel, threads?: number): { out: Float32Array; lse: Float32Array };
  /** Its backward over packed sequences (cuSeqlens: row offsets, nseq + 1). */
  attentionBackward(dout: Float32Array, q: Float32Array, k: Float32Array, v: Float32Array, out: Float32Array, lse: Float32Array, cuSeqlens: Int32Array, H: number, Hkv: number, D: number, kernel: AttentionKernel, threads?: number): { dq: Float32Array; dk: Float32Array; dv: Float32Array };
  /** The engine's SwiGLU forward (out = silu(gate) up) and backward on equal-length arrays. threads: all cores when left out. */
  swiglu(gate: Float32Array, up: Float32Array, dout: Float32Array, threads?: number): { out: Float32Array; dgate: Float32Array; dup: Float32Array };
  /** The engine's RMSNorm forward and backward on rows of C; dw accumulates from 0. threads: all cores when left out. */
  rmsnorm(x: Float32Array, w: Float32Array, dout: Float32Array, C: number, eps: number, threads?: number): { out: Float32Array; rstd: Float32Array; dx: Float32Array; dw: Float32Array };
  /** CPU seconds (best of reps, one thread) of the engine's attention forward and backward on one causal sequence of T rows. */
  attentionBench(T: number, H: number, Hkv: number, D: number, reps: number): Promise<{ forward: number; backward: number }>;
  /**
   * CPU seconds (best of reps, one thread) of the LM head's forward (with the saved g) and backward on N rows,
   * hidden C, vocabulary V, and of the plain GEMMs of the same shapes (the rate it is measured against).
   */
  lmHeadBench(N: number, C: number, V: number, reps: number): Promise<{ forward: number; backward: number; gemm: number }>;
  /** Forces (true) or releases (false) this addon's portable GEMM for every later call of this addon. */
  setPortableGemm(on: boolean): void;
  /** This addon's GEMM: its kernels and its fork guard's counters (as NativeAddon.info's fields of the same names). */
  info(): { openblas: boolean; portableGemm: boolean; gemmAvx512: boolean; blasCalls: number; forks: number };
}

let cached: NativeTestAddon | undefined;

/** The test addon (loaded once per process); ENGINE_UNAVAILABLE saying how to build it when it is not there. */
export function loadNativeTesting(): NativeTestAddon {
  if (!cached) {
    const path = findBuiltAddon('mcprl_native_test.node');
    if (!path)
      throw new EngineError('ENGINE_UNAVAILABLE', 'native test addon build/Release/mcprl_native_test.node not found: it is built with the addon by `node native/build.cjs` (or `npm install`)');
    setThreadEnv();
    try {
      cached = createRequire(import.meta.url)(path) as NativeTestAddon;
    } catch (e) {
      throw new EngineError('ENGINE_UNAVAILABLE', `cannot load native test addon ${path}: ${(e as Error).message}`, { cause: e });
    }
  }
  return cached;
}
