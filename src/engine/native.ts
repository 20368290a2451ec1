/**
 * Typed loader of the native addon (build/Release/mcprl_native.node, built by `npm install` from native/).
 * Everything here mirrors native/addon/ (addon.cc, engine_*.cc) one to one; src/engine/model.ts is the friendly face.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ModelSpec } from '../hf/config.js';
import type { CudaProbe, EngineBackend } from './device.js';
import type { KvCacheStats } from './kv-cache.js';
import type { PrefixCacheStats } from './prefix-cache.js';
import type { BatchSampling } from './sampling.js';
import type { WeightDtype } from './weight-dtype.js';
import { McprlError } from '../util/errors.js';

export type EngineErrorCode =
  | 'ENGINE_UNAVAILABLE' // the addon is not built or cannot be loaded
  | 'ENGINE_LOAD' // a model or adapter folder could not be loaded (bad file, tensor, config)
  | 'ENGINE_REQUEST' // a request the engine cannot serve (unknown adapter, bad token id, too long)
  | 'ENGINE_DEVICE' // the device asked for cannot run here (src/engine/device.ts names what is missing)
  | 'ENGINE_MEMORY' // the memory cannot hold it: a model at load, a request beyond the KV cache budget (kv-cache.ts)
  | 'ENGINE_NATIVE' // a failure inside a native call
  | 'ENGINE_CLOSED'; // the model was closed

/** Infrastructure failure of the local engine; `message` carries the native file:line when it came from C++. */
export class EngineError extends McprlError<EngineErrorCode> {}

export interface SampledTokens {
  tokens: Int32Array;
  /** log softmax(logits)[token] at temperature 1, whatever the sampling settings. */
  logprobs: Float32Array;
  /**
   * log of the token's probability under the distribution it was drawn from before top-k/top-p: softmax over
   * the allowed tokens of logits / temperature (temperature 1 when greedy). See native/engine/sample.h.
   */
  samplerLogprobs: Float32Array;
  /** Alternatives per row: the largest topLogprobs value of the call (0 when none was asked for). */
  topWidth: number;
  /**
   * (rows, topWidth): row i's most likely tokens under the distribution of `logprobs` (log softmax(logits) at
   * temperature 1), most likely first, ties by lower id; -1 past the row's own count.
   */
  topIds: Int32Array;
  /** (rows, topWidth): their log-probabilities, computed exactly as `logprobs` is. */
  topLogprobs: Float32Array;
}

/** One loaded model in native memory (class Engine in native/addon/engine.h). Calls must not overlap. */
export interface NativeEngine {
  /**
   * Reads the weights of `dir` for the architecture `spec` (config.json is read in TypeScript, src/hf/config.ts),
   * then moves them to `backend`'s memory (src/engine/device.ts; cuda after cudaProbe loaded the library).
   */
  load(dir: string, spec: ModelSpec, threads: number, weightDtype: WeightDtype, backend: EngineBackend): Promise<void>;
  /** Bytes of base weights held in memory per dtype (after load). */
  weightBytes(): { f32: number; bf16: number; f16: number };
  /** Reads adapter_model.safetensors of `dir` for the adapter that `config` (adapter_config.json, read in TypeScript) describes. */
  loadAdapter(name: string, dir: string, config: { r: number; alpha: number; rslora: boolean; targets: string[] }): Promise<{ r: number; alpha: number; scale: number; targets: string[] }>;
  unloadAdapter(name: string): void;
  /** Flat output aligned with tokens: 0 at each sequence start, then log p(tok[t] | tok[<t]). */
  score(tokens: Int32Array, lens: Int32Array, adapter: string | null, invTemp?: Float32Array | null, maskIdx?: Int32Array | null, masks?: Uint32Array | null): Promise<Float32Array>;
  /**
   * A KV-cache slot for up to `capacity` tokens (allocated by the first task that uses it); its bytes are reserved
   * under the KV budget now, and an error names them when they do not fit.
   */
  slotCreate(capacity: number): number;
  slotFree(id: number): void;
  /** Sampling RNG of the slot := f(seed, stream). */
  slotSeed(id: number, seed: number, stream: number): void;
  /** Copies src's cache and last hidden state into each dst. */
  fork(src: number, dsts: Int32Array): Promise<void>;
  /**
   * Appends each prompt's tokens to its slot, one prompt after the other, reusing the prefix cache's blocks when
   * the slot is empty (native/engine/prefix_cache.h).
   */
  prefill(slots: Int32Array, tokens: Int32Array, lens: Int32Array, adapters: (string | null)[]): Promise<void>;
  /** Samples the next token of each slot from its last hidden state, under `sampling` (one entry per slot). */
  sample(slots: Int32Array, sampling: BatchSampling): Promise<SampledTokens>;
  /** Appends one token per slot (one shared decode forward), then samples each slot's next token. */
  step(slots: Int32Array, tokens: Int32Array, adapters: (string | null)[], sampling: BatchSampling): Promise<SampledTokens>;
  /** The prefix cache's byte budget (0: off; a smaller budget evicts now). */
  prefixCache(capacityBytes: number): void;
  prefixCacheStats(): PrefixCacheStats;
  /** The KV cache's byte budget: slots' reservations and the prefix cache together (fails below the live reservations). */
  kvCache(budgetBytes: number): void;
  /** Bytes a slot of `capacity` tokens reserves: its keys and values. */
  kvSlotBytes(capacity: number): number;
  kvCacheStats(): KvCacheStats;
  /** The Backend table the model runs on (native/backend/backend.h). */
  backend(): EngineBackend;
  close(): void;
}

export interface NativeAddon {
  Engine: new () => NativeEngine;
  /** Forces (true) or releases (false) the portable GEMM for every later call; MCPRL_PORTABLE_GEMM=1 sets it at load. */
  setPortableGemm(on: boolean): void;
  /**
   * `blasCalls`: products OpenBLAS ran since the addon loaded; `forks`: forks of this process since then, each of
   * which waited for the OpenBLAS products in flight (OpenBLAS's fork handler hangs otherwise: see g_blas_fork in
   * native/kernels/gemm.cc). Both 0 without OpenBLAS. `taskThreads`: OS threads that have run the engine's asynchronous work
   * (1 once any ran: every task of the process runs on one compute thread, so there is one OpenMP team; see
   * native/addon/napi_util.cc).
   */
  info(): { openblas: boolean; portableGemm: boolean; gemmAvx512: boolean; backend: string; maxThreads: number; blasCalls: number; forks: number; taskThreads: number };
  /** Loads the CUDA library at `path` (native/backend/cuda_loader.cc) and probes the driver and device 0; never throws. */
  cudaProbe(path: string): CudaProbe;
  [key: string]: unknown;
}

let cached: NativeAddon | undefined;

/**
 * Finds build/Release/`file` from this file's location (src/engine or dist/src/engine) upward; null when absent.
 * Also finds the test addon (native-testing.ts).
 */
export function findBuiltAddon(file: string): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const p = join(dir, 'build', 'Release', file);
    if (existsSync(p)) return p;
    dir = dirname(dir);
  }
  return null;
}

function addonPath(): string {
  const p = findBuiltAddon('mcprl_native.node');
  if (!p) throw new EngineError('ENGINE_UNAVAILABLE', 'native addon build/Release/mcprl_native.node not found: run `npm install` (or `node native/build.cjs`)');
  return p;
}

/**
 * OpenBLAS's idle wait, in log2 CPU cycles, unless the environment sets one. After every sgemm its worker threads
 * spin (sched_yield) for 2^28 cycles, about 0.1 s, before they sleep. Prefill and training call sgemm every few
 * milliseconds between OpenMP regions, so on a machine with as many cores as threads a worker spun all the time
 * and took its core from the OpenMP team and the JavaScript thread: in a 3-step demo a quarter of the CPU
 * samples were in sched_yield (perf). 2^16 cycles (tens of microseconds) still covers back-to-back products. Only the waiting
 * changes: which thread computes what, and so every result, stays the same. OpenBLAS reads it when it loads,
 * with the addon, so it is set before that.
 */
const OPENBLAS_THREAD_TIMEOUT = '16';

/**
 * How long libgomp's workers spin at a barrier or the end of a parallel region before they sleep, unless the
 * environment sets it (GOMP_SPINCOUNT or OMP_WAIT_POLICY). All native work runs on one compute thread
 * (native/addon/napi_util.cc), so the process has one OpenMP team and libgomp would spin 300,000 times. Spinning longer
 * than the OS lends a core is ruinous when the cores are shared: with 30,000 spins two 4-step demos side by side
 * took 611 s each instead of 71 s (each team spun waiting for a worker the other process had descheduled), and in
 * training the team took its core from OpenBLAS's own worker (a LoRA step of the bundled model 1.6 s -> 2.7 s at
 * the default). 1,000 spins, libgomp's own figure for a process with more threads than cores, still bridge the gaps
 * between the regions of one decode step (a single process decodes as fast as with 30,000). Only the waiting
 * changes, never a result.
 */
const GOMP_SPINCOUNT = '1000';

/** The waits above, unless the environment sets them; before any addon (and OpenBLAS with it) loads. */
export function setThreadEnv(): void {
  process.env.OPENBLAS_THREAD_TIMEOUT ??= OPENBLAS_THREAD_TIMEOUT;
  if (process.env.OMP_WAIT_POLICY === undefined) process.env.GOMP_SPINCOUNT ??= GOMP_SPINCOUNT;
}

/** The loaded addon (loaded once per process). */
export function loadNative(): NativeAddon {
  if (!cached) {
    const path = addonPath();
    setThreadEnv();
    try {
      cached = createRequire(import.meta.url)(path) as NativeAddon;
    } catch (e) {
      throw new EngineError('ENGINE_UNAVAILABLE', `cannot load native addon ${path}: ${(e as Error).message}`, { cause: e });
    }
  }
  return cached;
}
