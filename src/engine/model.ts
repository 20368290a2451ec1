/**
 * The local engine's model: an HF folder loaded into the native addon, with LoRA adapters, batched
 * generation (continuous batching over a KV cache) and scoring.
 *
 * Log-probabilities: every sampled token comes with two. `logprobs`: log π(token | context) under the model
 * (with the request's adapter) at temperature 1 over the whole vocabulary, log softmax(logits)[token], whatever
 * the sampling settings — what an OpenAI-style `logprobs` reports. `samplerLogprobs`: the log-probability under
 * the distribution the token was drawn from before top-k/top-p truncation — softmax of logits / temperature
 * over the tokens a constraint allowed — which is what GRPO's importance ratio needs when the trainer computes
 * its log π the same way (src/engine/train-types.ts: TrainSequence.temperature, tokenMasks). Stop tokens (EOS
 * or stopTokenIds) are included in tokenIds with their logprobs, so training can teach the model to stop.
 */
import { basename, join, resolve } from 'node:path';
import { ModelConfigError, readModelConfig as readConfigFile, type ModelSpec } from '../hf/config.js';
import { readAdapterSettings } from '../hf/peft.js';
import { chooseDevice, cudaFreeBytes, engineBackend, type Device, type DeviceChoice } from './device.js';
import { WeightDtypeSchema, type WeightDtype } from './weight-dtype.js';
import { PrefixCacheMibSchema, type PrefixCacheMib, type PrefixCacheStats } from './prefix-cache.js';
import { availableMemory, kvBudget, mib, type KvCacheMib, type KvCacheStats } from './kv-cache.js';
import { EngineError, loadNative, type NativeAddon, type NativeEngine, type SampledTokens } from './native.js';
import { alternatives, packMasks, SAMPLING_DEFAULTS, type BatchSampling, type SamplingParams, type TokenAlternative, type TokenConstraint } from './sampling.js';

export { EngineError };
export type { SamplingParams, TokenAlternative, TokenConstraint } from './sampling.js';
export type { EngineErrorCode } from './native.js';

export interface GenerateRequest {
  promptIds: number[];
  /** Default 1; the n samples share the prompt's prefill. */
  n?: number;
  adapter?: string | null;
  sampling: SamplingParams;
  signal?: AbortSignal;
  /** `top`: the token's alternatives when sampling.topLogprobs > 0, else empty. */
  onToken?: (sample: number, tokenId: number, logprob: number, samplerLogprob: number, top: readonly TokenAlternative[]) => void;
  /** A constraint for sample i (called once per sample), or none: every token may be drawn. */
  constraint?: (sample: number) => TokenConstraint | null;
}

export interface GeneratedSequence {
  tokenIds: number[];
  /** log π at temperature 1 of each token in tokenIds, over the whole vocabulary. */
  logprobs: number[];
  /** log-probability of each token under the (tempered, constrained) distribution it was drawn from. */
  samplerLogprobs: number[];
  /** Per token of tokenIds, its sampling.topLogprobs alternatives, most likely first; only when asked for. */
  topLogprobs?: TokenAlternative[][];
  finishReason: 'stop' | 'length' | 'abort';
}

/** A loaded model's configuration: its architecture (every default resolved) and the EOS ids generation stops on. */
export interface ModelConfig extends ModelSpec {
  eosTokenIds: number[];
}

/** config.json (and generation_config.json's EOS ids) through the one reader, src/hf/config.ts. */
export async function readModelConfig(dir: string): Promise<ModelConfig> {
  try {
    const { spec, eosTokenIds } = await readConfigFile(dir);
    return { ...spec, eosTokenIds };
  } catch (e) {
    if (e instanceof ModelConfigError) throw new EngineError('ENGINE_LOAD', e.message, { cause: e });
    throw e;
  }
}

/** The architecture exactly as native/addon/engine_model.cc's load() reads it: every field, none optional. */
function nativeSpec(s: ModelSpec): ModelSpec {
  return {
    modelType: s.modelType, vocabSize: s.vocabSize, hiddenSize: s.hiddenSize, intermediateSize: s.intermediateSize,
    numLayers: s.numLayers, numHeads: s.numHeads, numKvHeads: s.numKvHeads, headDim: s.headDim,
    maxPositionEmbeddings: s.maxPositionEmbeddings, rmsNormEps: s.rmsNormEps, ropeTheta: s.ropeTheta, ropeScaling: s.ropeScaling,
    tieWordEmbeddings: s.tieWordEmbeddings, qkvBias: s.qkvBias, oBias: s.oBias, mlpBias: s.mlpBias, qkNorm: s.qkNorm,
  };
}

function nativeError(e: unknown, code: 'ENGINE_LOAD' | 'ENGINE_NATIVE' | 'ENGINE_REQUEST' = 'ENGINE_NATIVE'): EngineError {
  if (e instanceof EngineError) return e;
  return new EngineError(code, e instanceof Error ? e.message : String(e), { cause: e });
}

/** Upper bound on samples decoded together; further requests wait for free places. */
const MAX_ACTIVE_SAMPLES = 64;

interface Request {
  req: GenerateRequest;
  n: number;
  adapter: string | null;
  stops: Set<number>;
  maxTokens: number;
  capacity: number;
  /** Bytes each sample's slot reserves under the KV budget (its capacity's keys and values). */
  slotBytes: number;
  samples: Sample[];
  resolve: (v: GeneratedSequence[]) => void;
  reject: (e: unknown) => void;
  failed: boolean;
}

interface Sample {
  request: Request;
  index: number;
  slot: number;
  out: GeneratedSequence;
  done: boolean;
  last: number;
  constraint: TokenConstraint | null;
}

/** How Model.load sets up the engine; each field left out takes the engine's default. */
export interface ModelLoadOptions {
  /** OpenMP threads. Default all cores. */
  threads?: number;
  /** Where the engine runs (src/engine/device.ts). Default auto. */
  device?: Device;
  /** How the big matrices are kept (src/engine/weight-dtype.ts). Default auto. */
  weightDtype?: WeightDtype;
  /** The prefix cache's budget in MiB, 0 off (src/engine/prefix-cache.ts). Default 1024. */
  prefixCacheMib?: PrefixCacheMib;
  /** The KV cache's budget in MiB, prefix cache included (src/engine/kv-cache.ts). Default: a share of the memory available. */
  kvCacheMib?: KvCacheMib;
}

/** The ModelLoadOptions fields of a larger options object that are set (for callers that pass theirs on). */
export function modelLoadOptions(o: ModelLoadOptions): ModelLoadOptions {
  return {
    ...(o.threads !== undefined ? { threads: o.threads } : {}),
    ...(o.device !== undefined ? { device: o.device } : {}),
    ...(o.weightDtype !== undefined ? { weightDtype: o.weightDtype } : {}),
    ...(o.prefixCacheMib !== undefined ? { prefixCacheMib: o.prefixCacheMib } : {}),
    ...(o.kvCacheMib !== undefined ? { kvCacheMib: o.kvCacheMib } : {}),
  };
}

const engines = new WeakMap<Model, NativeEngine>();

/** The native engine behind a Model (for src/engine/trainer.ts, which adds training on the same weights). */
export function engineOf(model: Model): NativeEngine {
  const e = engines.get(model);
  if (!e) throw new EngineError('ENGINE_CLOSED', 'model is closed');
  return e;
}

/** The native addon (for code that calls module-level functions such as the trainer). */
export function nativeAddon(): NativeAddon {
  return loadNative();
}

export { WeightDtypeSchema, type WeightDtype } from './weight-dtype.js';
export { PrefixCacheMibSchema, type PrefixCacheMib, type PrefixCacheStats } from './prefix-cache.js';
export { KvCacheMibSchema, type KvCacheMib, type KvCacheStats } from './kv-cache.js';

export class Model {
  private engine: NativeEngine | null;
  private chain: Promise<unknown> = Promise.resolve();
  private adapters = new Set<string>();
  private pending: Request[] = [];
  private active: Sample[] = [];
  private looping = false;
  /** Bytes the running samples' slots reserve under kvBudget (native/engine/engine_state.h keeps the same account). */
  private kvReserved = 0;

  private constructor(
    readonly dir: string,
    readonly config: ModelConfig,
    engine: NativeEngine,
    /** The KV cache's budget in bytes (src/engine/kv-cache.ts). */
    readonly kvBudget: number,
    /** Bytes one token takes in a slot. */
    private readonly kvTokenBytes: number,
    /** Where the engine runs, and why (src/engine/device.ts). */
    readonly device: DeviceChoice,
  ) {
    this.engine = engine;
    engines.set(this, engine);
  }

  /**
   * Loads an HF folder (config.json + safetensors). threads: OpenMP threads, default all cores. prefixCacheMib:
   * the prefix cache's budget (src/engine/prefix-cache.ts; 0 turns it off). kvCacheMib: the KV cache's budget
   * (src/engine/kv-cache.ts). A model whose weights and one sequence at its full context do not fit the memory
   * available, or the budget asked for, is refused (EngineError ENGINE_MEMORY, naming the bytes of each).
   */
  static async load(dir: string, opts: ModelLoadOptions = {}): Promise<Model> {
    const weightDtype = WeightDtypeSchema.parse(opts.weightDtype);
    const prefixCacheMib = PrefixCacheMibSchema.parse(opts.prefixCacheMib);
    const abs = resolve(dir);
    const config = await readModelConfig(abs);
    // Before any weight is read: a device that cannot run is refused at once, naming what is missing.
    const device = chooseDevice(opts.device, { modelDir: abs });
    const backend = engineBackend(device.device);
    if (config.mlpBias) throw new EngineError('ENGINE_LOAD', `${join(abs, 'config.json')}: mlp_bias is not supported by the engine`);
    const addon = loadNative();
    const engine = new addon.Engine();
    // The KV cache lives where the weights do: on cuda its budget is a share of the GPU's free memory.
    const available = backend === 'cuda' ? cudaFreeBytes() : availableMemory();
    let budget: ReturnType<typeof kvBudget>;
    let tokenBytes: number;
    try {
      await engine.load(abs, nativeSpec(config), opts.threads ?? 0, weightDtype, backend);
      const w = engine.weightBytes();
      tokenBytes = engine.kvSlotBytes(1);
      budget = kvBudget({
        kvCacheMib: opts.kvCacheMib, available, weights: w.f32 + w.bf16 + w.f16, oneSequence: tokenBytes * config.maxPositionEmbeddings,
        context: config.maxPositionEmbeddings, dir: abs,
      });
      if ('bytes' in budget) {
        engine.kvCache(budget.bytes);
        engine.prefixCache(prefixCacheMib * 2 ** 20);
      }
    } catch (e) {
      engine.close();
      throw nativeError(e, 'ENGINE_LOAD');
    }
    if ('refused' in budget) {
      engine.close();
      throw new EngineError('ENGINE_MEMORY', budget.refused);
    }
    return new Model(abs, config, engine, budget.bytes, tokenBytes, device);
  }

  /** Runs native work strictly one call at a time (the native engine is single-tasked). */
  run<T>(fn: (e: NativeEngine) => T | Promise<T>): Promise<T> {
    const next = this.chain.then(() => fn(this.live()));
    this.chain = next.catch(() => undefined);
    return next;
  }

  private live(): NativeEngine {
    if (!this.engine) throw new EngineError('ENGINE_CLOSED', 'model is closed');
    return this.engine;
  }

  /** Bytes of base weights in memory per dtype (f32, bf16, f16). */
  weightBytes(): { f32: number; bf16: number; f16: number } {
    return this.live().weightBytes();
  }

  /** The prefix cache's counters since load and its size now (src/engine/prefix-cache.ts); never waits for the engine. */
  prefixCacheStats(): PrefixCacheStats {
    return this.live().prefixCacheStats();
  }

  /** The KV cache's counters (src/engine/kv-cache.ts): its budget, what is reserved and held now, and the peaks; never waits for the engine. */
  kvCacheStats(): KvCacheStats {
    return this.live().kvCacheStats();
  }

  /** A new budget for the prefix cache in MiB (0 turns it off and frees it; a smaller one evicts now). */
  setPrefixCache(mib: PrefixCacheMib): Promise<void> {
    const bytes = PrefixCacheMibSchema.parse(mib) * 2 ** 20;
    return this.run((e) => e.prefixCache(bytes));
  }

  adapterNames(): string[] {
    return [...this.adapters];
  }

  /** Loads a PEFT adapter folder under `name` (replacing an adapter of that name). */
  async loadAdapter(name: string, dir: string): Promise<void> {
    const abs = resolve(dir);
    try {
      // adapter_config.json is read here; native code reads only adapter_model.safetensors.
      const settings = await readAdapterSettings(abs);
      await this.run((e) => e.loadAdapter(name, abs, settings));
    } catch (e) {
      throw nativeError(e, 'ENGINE_LOAD');
    }
    this.adapters.add(name);
  }

  /** Registers an adapter that native code created under `name` (the trainer's new adapters). */
  registerAdapter(name: string): void {
    this.adapters.add(name);
  }

  unloadAdapter(name: string): void {
    if (this.active.some((s) => s.request.adapter === name) || this.pending.some((r) => r.adapter === name))
      throw new EngineError('ENGINE_REQUEST', `adapter '${name}' is in use by a running generation`);
    this.adapters.delete(name);
    void this.run((e) => e.unloadAdapter(name)).catch(() => undefined);
  }

  /** Generation requests waiting to be admitted, and requests with samples decoding now. */
  queue(): { waiting: number; running: number } {
    return { waiting: this.pending.length, running: new Set(this.active.map((x) => x.request)).size };
  }

  /**
   * Per-token logprobs: out[i][t] = log p(seqs[i][t] | seqs[i][<t]), out[i][0] = 0 — at temperature 1 over the
   * whole vocabulary unless `temperatures` (one per sequence) or `tokenMasks` (per sequence, aligned with its
   * tokens: the bitset token t was drawn from, or null) say otherwise, the way the trainer computes log π of a
   * TrainSequence (softmax of logits ÷ temperature, renormalised over the allowed set).
   */
  async score(seqs: number[][], opts: { adapter?: string | null; temperatures?: number[]; tokenMasks?: ((Uint32Array | null)[] | undefined)[] } = {}): Promise<Float32Array[]> {
    const adapter = opts.adapter ?? null;
    this.checkAdapter(adapter);
    const lens = Int32Array.from(seqs, (s) => s.length);
    const flat = new Int32Array(lens.reduce((a, b) => a + b, 0));
    let o = 0;
    for (const s of seqs) {
      for (const t of s) this.checkToken(t);
      flat.set(s, o);
      o += s.length;
    }
    const temps = opts.temperatures;
    if (temps && (temps.length !== seqs.length || temps.some((t) => !(t > 0 && Number.isFinite(t))))) {
      throw new EngineError('ENGINE_REQUEST', `score: temperatures must be one positive number per sequence (${seqs.length})`);
    }
    const invTemp = temps && temps.some((t) => t !== 1) ? Float32Array.from(seqs.flatMap((s, i) => s.map(() => 1 / temps[i]))) : null;
    const masked = this.scoreMasks(seqs, opts.tokenMasks);
    let out: Float32Array;
    try {
      out = await this.run((e) => e.score(flat, lens, adapter, invTemp, masked?.idx ?? null, masked?.bits ?? null));
    } catch (e) {
      throw nativeError(e);
    }
    const res: Float32Array[] = [];
    o = 0;
    for (const n of lens) {
      res.push(out.slice(o, o + n));
      o += n;
    }
    return res;
  }

  /** The per-token index into one array of distinct bitsets that native score reads (null: nothing masked). */
  private scoreMasks(seqs: number[][], tokenMasks: ((Uint32Array | null)[] | undefined)[] | undefined): { idx: Int32Array; bits: Uint32Array } | null {
    if (!tokenMasks || !tokenMasks.some((m) => m?.some((x) => x))) return null;
    if (tokenMasks.length !== seqs.length) throw new EngineError('ENGINE_REQUEST', `score: tokenMasks must have one entry per sequence (${seqs.length})`);
    const words = Math.ceil(this.config.vocabSize / 32);
    const perToken = seqs.flatMap((s, i) => {
      const ms = tokenMasks[i];
      if (ms && ms.length !== s.length) throw new EngineError('ENGINE_REQUEST', `score: sequence ${i} has ${s.length} tokens but ${ms.length} token masks`);
      return s.map((_, t) => {
        const m = ms?.[t] ?? null;
        if (m && m.length !== words) throw new EngineError('ENGINE_REQUEST', `score: sequence ${i}, token ${t}: a mask has ${m.length} words, the vocabulary needs ${words}`);
        return m;
      });
    });
    return packMasks(perToken, words);
  }

  /** Samples n continuations of the prompt; joins the decode steps of any other running generation. */
  generate(req: GenerateRequest): Promise<GeneratedSequence[]> {
    return new Promise<GeneratedSequence[]>((resolveP, rejectP) => {
      const n = req.n ?? 1;
      const adapter = req.adapter ?? null;
      const s = req.sampling;
      if (!Number.isInteger(n) || n < 1) throw new EngineError('ENGINE_REQUEST', `n must be a positive integer, got ${n}`);
      if (!Number.isInteger(s.maxTokens) || s.maxTokens < 0) throw new EngineError('ENGINE_REQUEST', `maxTokens must be a non-negative integer, got ${s.maxTokens}`);
      const top = s.topLogprobs ?? 0;
      if (!Number.isInteger(top) || top < 0 || top > this.config.vocabSize)
        throw new EngineError('ENGINE_REQUEST', `topLogprobs must be an integer in [0, ${this.config.vocabSize}], got ${top}`);
      if (req.promptIds.length === 0) throw new EngineError('ENGINE_REQUEST', 'empty prompt');
      for (const t of req.promptIds) this.checkToken(t);
      this.checkAdapter(adapter);
      this.live();
      const maxPos = this.config.maxPositionEmbeddings;
      if (req.promptIds.length >= maxPos)
        throw new EngineError('ENGINE_REQUEST', `prompt of ${req.promptIds.length} tokens leaves no room under max_position_embeddings ${maxPos}`);
      // The cache holds the prompt and every generated token but the last (never fed back).
      const capacity = Math.min(req.promptIds.length + Math.max(s.maxTokens, 1), maxPos);
      const slotBytes = capacity * this.kvTokenBytes;
      // Samples of a request are admitted together: n that could never fit at once is refused, not left waiting.
      if (n * slotBytes > this.kvBudget)
        throw new EngineError(
          'ENGINE_MEMORY',
          `${n} sample${n > 1 ? 's' : ''} of ${capacity} tokens (prompt and max tokens) need${n > 1 ? '' : 's'} ${n * slotBytes} bytes (${mib(n * slotBytes)}) of KV cache; ` +
            `the budget is ${this.kvBudget} bytes (${mib(this.kvBudget)}, --kv-cache-mib): ask for fewer samples or tokens`,
        );
      const r: Request = {
        req,
        n,
        adapter,
        stops: new Set([...this.config.eosTokenIds, ...(s.stopTokenIds ?? [])]),
        maxTokens: s.maxTokens,
        capacity,
        slotBytes,
        samples: [],
        resolve: resolveP,
        reject: rejectP,
        failed: false,
      };
      if (s.maxTokens === 0 || req.signal?.aborted) {
        const reason = s.maxTokens === 0 ? 'length' : 'abort';
        resolveP(Array.from({ length: n }, () => ({ ...emptySequence(s), finishReason: reason })));
        return;
      }
      this.pending.push(r);
      this.kick();
    });
  }

  /** Frees native memory; later calls throw EngineError ENGINE_CLOSED. Running generations are rejected. */
  close(): void {
    const e = this.engine;
    if (!e) return;
    this.engine = null;
    engines.delete(this);
    const err = new EngineError('ENGINE_CLOSED', 'model closed during generation');
    for (const r of this.pending) r.reject(err);
    for (const smp of this.active) if (!smp.request.failed) { smp.request.failed = true; smp.request.reject(err); }
    this.pending = [];
    this.active = [];
    // Waits for an in-flight native task: close() in native takes the engine lock.
    void this.chain.then(() => e.close());
  }

  private checkToken(t: number): void {
    if (!Number.isInteger(t) || t < 0 || t >= this.config.vocabSize)
      throw new EngineError('ENGINE_REQUEST', `token id ${t} out of range [0, ${this.config.vocabSize})`);
  }

  private checkAdapter(a: string | null): void {
    if (a !== null && !this.adapters.has(a)) throw new EngineError('ENGINE_REQUEST', `unknown adapter '${a}' (loaded: ${this.adapterNames().join(', ') || 'none'})`);
  }

  private kick(): void {
    if (this.looping) return;
    this.looping = true;
    void this.loop().finally(() => {
      this.looping = false;
      if (this.engine && (this.pending.length || this.active.length)) this.kick();
    });
  }

  // The scheduler: admit waiting requests (prefill, fork for n > 1, first sample), then one shared decode
  // step for every running sample, until nothing is left. Other native calls (score, adapters) interleave
  // between steps through run(). Requests are admitted first come, first served, while their samples fit under
  // MAX_ACTIVE_SAMPLES and their slots' reservations fit the KV budget beside the running samples' (the prefix
  // cache gives up its blocks for them: native/engine/engine_state.h); otherwise the first waits, and those behind it with
  // it, until running samples finish. Nothing waits forever: a request that cannot fit alone was refused by generate().
  private async loop(): Promise<void> {
    while (this.engine && (this.pending.length || this.active.length)) {
      this.dropAborted();
      if (this.pending.length && this.fits(this.pending[0], this.active.length, this.kvReserved)) await this.admit();
      if (this.active.length) await this.decode();
    }
  }

  /** Whether request r can be admitted beside `count` running samples that reserve `reserved` bytes. */
  private fits(r: Request, count: number, reserved: number): boolean {
    return count + r.n <= Math.max(MAX_ACTIVE_SAMPLES, r.n) && reserved + r.n * r.slotBytes <= this.kvBudget;
  }

  private async admit(): Promise<void> {
    const batch: Request[] = [];
    let count = this.active.length;
    let reserved = this.kvReserved;
    while (this.pending.length && this.fits(this.pending[0], count, reserved)) {
      const r = this.pending.shift()!;
      count += r.n;
      reserved += r.n * r.slotBytes;
      batch.push(r);
    }
    const fresh: Sample[] = [];
    try {
      await this.run(async (e) => {
        for (const r of batch) {
          const seed = r.req.sampling.seed ?? Math.floor(Math.random() * 2 ** 32);
          for (let i = 0; i < r.n; i++) {
            // The sample holds its slot's reservation from here on: release() gives both back whatever fails next.
            const x: Sample = {
              request: r, index: i, slot: e.slotCreate(r.capacity), done: false, last: -1, constraint: null,
              out: { ...emptySequence(r.req.sampling), finishReason: 'length' },
            };
            this.kvReserved += r.slotBytes;
            r.samples.push(x);
            e.slotSeed(x.slot, seed, i);
            x.constraint = r.req.constraint?.(i) ?? null;
          }
        }
        const prompts = batch.map((r) => r.req.promptIds);
        const flat = Int32Array.from(prompts.flat());
        await e.prefill(Int32Array.from(batch, (r) => r.samples[0].slot), flat, Int32Array.from(prompts, (p) => p.length), batch.map((r) => r.adapter));
        for (const r of batch) if (r.n > 1) await e.fork(r.samples[0].slot, Int32Array.from(r.samples.slice(1), (x) => x.slot));
        for (const r of batch) fresh.push(...r.samples);
        const res = await e.sample(Int32Array.from(fresh, (x) => x.slot), this.batchSampling(fresh));
        this.active.push(...fresh);
        this.accept(fresh, res);
      });
    } catch (err) {
      for (const r of batch) this.fail(r, nativeError(err));
    }
  }

  private async decode(): Promise<void> {
    const live = this.active.slice();
    try {
      await this.run(async (e) => {
        const res = await e.step(Int32Array.from(live, (x) => x.slot), Int32Array.from(live, (x) => x.last), live.map((x) => x.request.adapter), this.batchSampling(live));
        this.accept(live, res);
      });
    } catch (err) {
      const reqs = new Set(live.map((x) => x.request));
      for (const r of reqs) this.fail(r, nativeError(err));
    }
  }

  /**
   * The batch's sampling settings as the engine reads them, one entry per sample: each request's settings (their
   * defaults filled in) and its sample's allowed set now. Made here, with the rest of the batch's call.
   */
  private batchSampling(samples: readonly Sample[]): BatchSampling {
    const sp = samples.map((x) => x.request.req.sampling);
    const words = Math.ceil(this.config.vocabSize / 32);
    const allowed = samples.map((x) => {
      const m = x.constraint?.allowed() ?? null;
      if (m && m.length !== words) throw new EngineError('ENGINE_REQUEST', `a token mask has ${m.length} words; the vocabulary needs ${words}`);
      return m;
    });
    const masks = packMasks(allowed, words);
    return {
      temperature: Float32Array.from(sp, (s) => s.temperature ?? SAMPLING_DEFAULTS.temperature),
      topP: Float32Array.from(sp, (s) => s.topP ?? SAMPLING_DEFAULTS.topP),
      topK: Int32Array.from(sp, (s) => s.topK ?? SAMPLING_DEFAULTS.topK),
      topLogprobs: Int32Array.from(sp, (s) => s.topLogprobs ?? SAMPLING_DEFAULTS.topLogprobs),
      maskIdx: masks?.idx ?? null,
      masks: masks?.bits ?? null,
    };
  }

  // Records each sample's new token, calls onToken, and finishes samples on a stop token or length.
  private accept(samples: Sample[], res: SampledTokens): void {
    samples.forEach((x, i) => {
      if (x.done || x.request.failed) return;
      const tok = res.tokens[i];
      const lp = res.logprobs[i];
      const slp = res.samplerLogprobs[i];
      const top = alternatives(res, i, x.request.req.sampling.topLogprobs ?? 0);
      x.out.tokenIds.push(tok);
      x.out.logprobs.push(lp);
      x.out.samplerLogprobs.push(slp);
      x.out.topLogprobs?.push(top);
      x.last = tok;
      const r = x.request;
      try {
        x.constraint?.advance(tok);
        r.req.onToken?.(x.index, tok, lp, slp, top);
      } catch (err) {
        this.fail(r, err);
        return;
      }
      const total = r.req.promptIds.length + x.out.tokenIds.length;
      if (r.stops.has(tok)) this.finish(x, 'stop');
      else if (x.out.tokenIds.length >= r.maxTokens || total >= r.capacity + 1 || total >= this.config.maxPositionEmbeddings) this.finish(x, 'length');
    });
  }

  private dropAborted(): void {
    for (const r of this.pending.slice()) {
      if (r.req.signal?.aborted) {
        this.pending.splice(this.pending.indexOf(r), 1);
        r.resolve(Array.from({ length: r.n }, () => ({ ...emptySequence(r.req.sampling), finishReason: 'abort' as const })));
      }
    }
    for (const x of this.active.slice()) if (!x.done && x.request.req.signal?.aborted) this.finish(x, 'abort');
  }

  private release(x: Sample): void {
    const i = this.active.indexOf(x);
    if (i >= 0) this.active.splice(i, 1);
    this.kvReserved -= x.request.slotBytes;
    const e = this.engine;
    if (e) void this.run(() => e.slotFree(x.slot)).catch(() => undefined);
  }

  private finish(x: Sample, reason: GeneratedSequence['finishReason']): void {
    x.done = true;
    x.out.finishReason = reason;
    this.release(x);
    const r = x.request;
    if (!r.failed && r.samples.every((s) => s.done)) r.resolve(r.samples.map((s) => s.out));
  }

  private fail(r: Request, err: unknown): void {
    if (r.failed) return;
    r.failed = true;
    for (const x of r.samples) if (!x.done) { x.done = true; this.release(x); }
    r.reject(err);
  }
}

/** A sequence with no tokens yet (with a place for alternatives when the request asks for them). */
function emptySequence(s: SamplingParams): Omit<GeneratedSequence, 'finishReason'> {
  return { tokenIds: [], logprobs: [], samplerLogprobs: [], ...((s.topLogprobs ?? 0) > 0 ? { topLogprobs: [] } : {}) };
}

/** A short name for a model folder (its last path component). */
export function modelName(dir: string): string {
  return basename(resolve(dir));
}
