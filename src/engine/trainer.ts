/**
 * LoRA training on the native engine: GRPO-family policy-gradient steps, SFT steps, AdamW, checkpoints.
 *
 * One Trainer owns one trainable adapter, registered in the loaded Model under `adapterName`: generation and
 * scoring with that name see the newest weights after every step, with no reload. The loss definitions are in
 * native/train/loss.h; the per-token log-probability of token t is log π(tokenIds[t] | tokenIds[<t]) under the
 * distribution the sampler drew it from: softmax of logits ÷ the sequence's temperature, renormalised over the
 * token's allowed set when constrained decoding restricted it (TrainSequence.temperature, tokenMasks).
 *
 * A step packs the batch into micro-batches of about `microBatchTokens` tokens (attention never crosses a
 * sequence), runs forward + backward on each, and accumulates gradients. Every batch-level normaliser (number
 * of sequences, number of loss tokens, dr_grpo's max length) is fixed from the whole batch before the first
 * micro-batch, so the accumulated gradient equals the whole-batch gradient whatever the packing.
 */
import { basename } from 'node:path';
import {
  LORA_TARGETS,
  adapterLayout,
  modelDims,
  readOptimizerState,
  readPeftAdapter,
  targetList,
  validateAdapter,
  writeOptimizerState,
  writePeftAdapter,
  type LoraMatrix,
  type LoraTarget,
  type TrainerState,
} from '../hf/peft.js';
import { writeDirAtomic } from '../util/atomic.js';
import { McprlError } from '../util/errors.js';
import { Mulberry32 } from '../util/rng.js';
import { engineOf, nativeAddon, type Model } from './model.js';
import { packBatch, type NativeMicroBatch } from './train-batch.js';
import {
  DEFAULT_MICRO_BATCH_TOKENS,
  LossConfigSchema,
  OptimizerConfigSchema,
  lossParams,
  type LossConfig,
  type LrSchedule,
  type OptimizerConfig,
  type ResolvedLoss,
  type ResolvedOptimizer,
  type StepMetrics,
  type TrainSequence,
} from './train-types.js';

export { LossConfigSchema, OptimizerConfigSchema, packBatch };
export type { LossConfig, OptimizerConfig, StepMetrics, TrainSequence };

export interface CreateTrainerOptions {
  adapterName: string;
  rank: number;
  alpha: number;
  /** Module names, e.g. ['q_proj', 'v_proj'] (see LORA_TARGETS). */
  targets: string[];
  /** Scale alpha / sqrt(rank) instead of alpha / rank. Default false. */
  rslora?: boolean;
  /** Seeds the kaiming-uniform initialisation of every A (B starts at zero). */
  seed: number;
  /** The optimiser settings of steps that give none of their own (TrainStepOptions.optimizer). Default none. */
  optimizer?: OptimizerConfig;
}

export interface ResumeTrainerOptions {
  /** Name to register the adapter under. Default: the saved trainer state's name, else the folder's name. */
  adapterName?: string;
  /** The optimiser settings of steps that give none of their own. Default: those the checkpoint was saved with. */
  optimizer?: OptimizerConfig;
  /** Seed recorded for a bare adapter. Default 0. */
  seed?: number;
}

export interface StepOptions {
  /** Token budget per packed micro-batch. Default DEFAULT_MICRO_BATCH_TOKENS. A longer sequence gets a micro-batch of its own. */
  microBatchTokens?: number;
  /**
   * Per-layer activation recompute: keep only each layer's input during the forward and rebuild the layer's
   * activations just before its backward. Activation memory of one layer instead of all, for about one extra
   * forward of the layers. Same gradients. Default false.
   */
  recompute?: boolean;
  /**
   * Fold the adapter into the base weights for the step (CPU only): each projection reads W + scale · B A, and A
   * and B take their gradients from the dense one, dyᵀ x: per projection, one product over the step's rows instead
   * of three in the forward and two instead of five in the backward, for an f32 copy of every targeted matrix.
   * The same gradients up to rounding (another order of additions). Pays from a rank of about in · out / (3 (in +
   * out)) up (the tiny model's warm-up: rank 128 on width 128, 1.46× a step). Default false.
   */
  foldLora?: boolean;
}

export interface TrainStepOptions extends StepOptions {
  /** This step's optimiser settings. Default: the trainer's (create/resume's `optimizer`). */
  optimizer?: OptimizerConfig;
  /**
   * The learning rate's schedule over this trainer's optimiser steps, the optimiser's `lr` its peak: the step's
   * rate is learningRate(schedule, lr, step), step counting the optimiser steps taken before it. Default constant.
   */
  schedule?: LrSchedule;
}

/**
 * The learning rate of the optimiser step with 0-based index `step`:
 *   constant: lr;  warmup: lr · min(1, (step + 1) / warmupSteps);
 *   cosine: warm-up as above, then lr · ½ (1 + cos(π p)), p = (step − warmupSteps) / max(1, totalSteps − warmupSteps)
 *   clamped to [0, 1]. (Hugging Face's schedules give step 0 a zero learning rate; here the first step learns.)
 * No schedule is constant.
 */
export function learningRate(schedule: LrSchedule | undefined, lr: number, step: number): number {
  if (schedule === undefined || schedule.kind === 'constant') return lr;
  const { kind, warmupSteps: warmup } = schedule;
  if (warmup > 0 && step < warmup) return (lr * (step + 1)) / warmup;
  if (kind === 'warmup') return lr;
  const total = schedule.totalSteps ?? 0;
  const p = Math.min(1, Math.max(0, (step - warmup) / Math.max(1, total - warmup)));
  return lr * 0.5 * (1 + Math.cos(Math.PI * p));
}

interface LayoutEntry { key: string; offset: number; rows: number; cols: number }
interface NativeRunResult {
  loss: number; policyLoss: number; klSum: number; ratioSum: number; clipped: number; tokens: number;
  nllSum: number; entropySum: number; gradNorm: number; seconds: number; logprobs?: Float32Array;
}
interface NativeTrainer {
  layout(): LayoutEntry[];
  read(which: 'params' | 'grads' | 'exp_avg' | 'exp_avg_sq'): Float32Array;
  write(which: 'params' | 'grads' | 'exp_avg' | 'exp_avg_sq', data: Float32Array): void;
  run(microBatches: NativeMicroBatch[], loss: Record<string, unknown>, optim: Record<string, unknown> | null, wantLogprobs: boolean, recompute: boolean, foldLora: boolean): Promise<NativeRunResult>;
}

/** The training part of the addon (native/train/train_napi.cc). */
interface TrainAddon {
  Trainer: new (engine: unknown, name: string, r: number, alpha: number, rslora: boolean, targets: string[]) => NativeTrainer;
}
function trainAddon(): TrainAddon {
  const a = nativeAddon() as unknown as Partial<TrainAddon>;
  if (typeof a.Trainer !== 'function') throw new McprlError('TRAIN_NATIVE', 'the native addon was built without the trainer (rebuild: npm install)');
  return a as TrainAddon;
}

export class Trainer {
  /** Optimiser steps taken so far. */
  step: number;
  readonly adapterName: string;
  private closed = false;
  /** The settings of the latest optimiser step, recorded with a checkpoint. */
  private lastOptimizer: ResolvedOptimizer | null = null;

  private constructor(
    readonly model: Model,
    private readonly native: NativeTrainer,
    readonly config: { rank: number; alpha: number; rslora: boolean; targets: LoraTarget[]; seed: number },
    /** The optimiser settings of steps that give none of their own (null: every step must). */
    readonly optimizer: ResolvedOptimizer | null,
    private readonly rng: Mulberry32,
    private readonly layout: LayoutEntry[],
    adapterName: string,
    step: number,
  ) {
    this.adapterName = adapterName;
    this.step = step;
  }

  /** Creates the native adapter + optimiser buffers and fills them, in the model's queue of native calls. */
  private static async makeNative(model: Model, name: string, rank: number, alpha: number, rslora: boolean, targets: LoraTarget[],
    fill: (n: NativeTrainer, layout: LayoutEntry[]) => void): Promise<{ native: NativeTrainer; layout: LayoutEntry[] }> {
    if (!Number.isInteger(rank) || rank <= 0) throw new McprlError('TRAIN_INVALID_CONFIG', `rank must be a positive integer, got ${rank}`);
    if (!(alpha > 0)) throw new McprlError('TRAIN_INVALID_CONFIG', `alpha must be positive, got ${alpha}`);
    if (targets.length === 0) throw new McprlError('TRAIN_INVALID_CONFIG', 'at least one LoRA target module is needed');
    const addon = trainAddon();
    return model.run(() => {
      let native: NativeTrainer;
      try {
        native = new addon.Trainer(engineOf(model), name, rank, alpha, rslora, targets);
      } catch (e) {
        throw new McprlError('TRAIN_NATIVE', (e as Error).message, { cause: e });
      }
      const layout = native.layout();
      try {
        fill(native, layout);
      } catch (e) {
        engineOf(model).unloadAdapter(name);
        throw e;
      }
      model.registerAdapter(name);
      return { native, layout };
    });
  }

  private static checkTargets(targets: string[]): LoraTarget[] {
    for (const t of targets) {
      if (!(LORA_TARGETS as readonly string[]).includes(t)) throw new McprlError('TRAIN_INVALID_CONFIG', `unsupported LoRA target ${JSON.stringify(t)} (supported: ${LORA_TARGETS.join(', ')})`);
    }
    return LORA_TARGETS.filter((t) => targets.includes(t));
  }

  /** A new adapter: every A kaiming-uniform (PEFT's default, bound 1/sqrt(in)) from `seed`, every B zero. */
  static async create(model: Model, opts: CreateTrainerOptions): Promise<Trainer> {
    const optimizer = opts.optimizer !== undefined ? parseOptimizer(opts.optimizer) : null;
    const targets = Trainer.checkTargets(opts.targets);
    const rslora = opts.rslora ?? false;
    const rng = new Mulberry32(opts.seed);
    const { native, layout } = await Trainer.makeNative(model, opts.adapterName, opts.rank, opts.alpha, rslora, targets, (n, layout) => {
      const params = new Float32Array(n.read('params').length);
      for (const e of layout) {
        if (!e.key.endsWith('.lora_A.weight')) continue;
        // torch.nn.init.kaiming_uniform_(A, a=sqrt(5)): bound = sqrt(6 / ((1 + 5) fan_in)) = 1 / sqrt(fan_in).
        const bound = 1 / Math.sqrt(e.cols);
        for (let i = 0; i < e.rows * e.cols; i++) params[e.offset + i] = (2 * rng.uniform() - 1) * bound;
      }
      n.write('params', params);
    });
    return new Trainer(model, native, { rank: opts.rank, alpha: opts.alpha, rslora, targets, seed: opts.seed }, optimizer, rng, layout, opts.adapterName, 0);
  }

  /** Continues from a folder written by save() (adapter + optimiser state), or starts from a bare PEFT adapter. */
  static async resume(model: Model, adapterDir: string, opts: ResumeTrainerOptions = {}): Promise<Trainer> {
    const adapter = await readPeftAdapter(adapterDir);
    const saved = await readOptimizerState(adapterDir);
    const dims = modelDims(model.config);
    validateAdapter(adapter, dims, adapterDir);
    // A checkpoint saved before any step with optimiser settings records none ({}).
    const savedOptimizer = saved && Object.keys(saved.state.optimizer).length > 0 ? (saved.state.optimizer as OptimizerConfig) : undefined;
    const given = opts.optimizer ?? savedOptimizer;
    const optimizer = given !== undefined ? parseOptimizer(given) : null;
    const targets = targetList(adapter.config, adapterDir);
    const name = opts.adapterName ?? saved?.state.adapterName ?? basename(adapterDir);
    const c = adapter.config;
    const { native, layout } = await Trainer.makeNative(model, name, c.r, c.lora_alpha, c.use_rslora, targets, (n, layout) => {
      const expected = adapterLayout(dims, c.r, targets);
      if (expected.length !== layout.length || expected.some((e, i) => e.key !== layout[i].key)) {
        throw new McprlError('TRAIN_NATIVE', 'native adapter layout differs from the PEFT layout (engine and src/hf/peft.ts disagree)');
      }
      n.write('params', pack(layout, adapter.tensors, adapterDir));
      if (saved) {
        n.write('exp_avg', pack(layout, saved.moments.expAvg, `${adapterDir}/optimizer.safetensors (exp_avg)`));
        n.write('exp_avg_sq', pack(layout, saved.moments.expAvgSq, `${adapterDir}/optimizer.safetensors (exp_avg_sq)`));
      }
    });
    const seed = saved?.state.seed ?? opts.seed ?? 0;
    return new Trainer(model, native, { rank: c.r, alpha: c.lora_alpha, rslora: c.use_rslora, targets, seed }, optimizer,
      new Mulberry32(saved?.state.rng ?? seed), layout, name, saved?.state.step ?? 0);
  }

  /** One optimiser step on the batch: forward/backward over packed micro-batches, clip, AdamW. */
  async trainStep(batch: TrainSequence[], loss: LossConfig, opts: TrainStepOptions = {}): Promise<StepMetrics> {
    const lc = parseLoss(loss);
    const given = opts.optimizer !== undefined ? parseOptimizer(opts.optimizer) : this.optimizer;
    if (!given) throw new McprlError('TRAIN_INVALID_CONFIG', `trainer for adapter ${this.adapterName}: a step needs optimiser settings (opts.optimizer; none were given to create or resume)`);
    // The step's own settings: its rate on the schedule, from the optimiser steps taken before it.
    const o = { ...given, lr: learningRate(opts.schedule, given.lr, this.step) };
    this.checkMasks(batch);
    const mbs = packBatch(await this.withOldLogprobs(batch, lc), lc, opts.microBatchTokens ?? DEFAULT_MICRO_BATCH_TOKENS);
    const r = await this.run(mbs.microBatches, lc, { ...o, step: this.step + 1 }, false, opts);
    this.step += 1;
    this.lastOptimizer = o;
    return { ...metrics(r, mbs.totalTokens), lr: o.lr, step: this.step };
  }

  /** SFT: cross-entropy on the masked tokens, averaged over all masked tokens of the batch. */
  async sftStep(batch: TrainSequence[], opts: TrainStepOptions = {}): Promise<StepMetrics> {
    return this.trainStep(batch, { kind: 'sft' }, opts);
  }

  /** Gradients of the loss w.r.t. every LoRA tensor (PEFT key → values, row-major), with no update or clipping. */
  async computeGradients(batch: TrainSequence[], loss: LossConfig, opts: StepOptions = {}): Promise<Map<string, Float32Array>> {
    return (await this.gradientsWithMetrics(batch, loss, opts)).grads;
  }

  /** computeGradients plus the step's metrics and the current log-probabilities of the loss tokens. */
  async gradientsWithMetrics(batch: TrainSequence[], loss: LossConfig, opts: StepOptions = {}): Promise<{ grads: Map<string, Float32Array>; metrics: StepMetrics; logprobs: Float32Array }> {
    const lc = parseLoss(loss);
    this.checkMasks(batch);
    const mbs = packBatch(await this.withOldLogprobs(batch, lc), lc, opts.microBatchTokens ?? DEFAULT_MICRO_BATCH_TOKENS);
    const r = await this.run(mbs.microBatches, lc, null, true, opts);
    const flat = await this.nativeRead('grads');
    const grads = new Map<string, Float32Array>();
    for (const e of this.layout) grads.set(e.key, flat.slice(e.offset, e.offset + e.rows * e.cols));
    return { grads, metrics: metrics(r, mbs.totalTokens), logprobs: r.logprobs ?? new Float32Array(0) };
  }

  /** The adapter's current weights (PEFT key → matrix). */
  async weights(): Promise<Map<string, LoraMatrix>> {
    return unpack(this.layout, await this.nativeRead('params'));
  }

  /** Replaces the adapter's weights (every PEFT key, same shapes); the optimiser state is kept. */
  async setWeights(tensors: Map<string, LoraMatrix>): Promise<void> {
    const flat = pack(this.layout, tensors, `adapter ${this.adapterName}`);
    if (this.closed) throw new McprlError('TRAIN_CLOSED', `trainer for adapter ${this.adapterName} is closed`);
    await this.model.run(() => this.native.write('params', flat));
  }

  /** Writes the PEFT adapter alone into `dir`, atomically: what an inference server loads (see save for a checkpoint). */
  async saveAdapter(dir: string): Promise<void> {
    if (this.closed) throw new McprlError('TRAIN_CLOSED', `trainer for adapter ${this.adapterName} is closed`);
    const params = await this.model.run(() => this.native.read('params'));
    await writeDirAtomic(dir, (tmp) => writePeftAdapter(tmp, { config: this.peftConfig(), tensors: unpack(this.layout, params) }));
  }

  /** Writes the PEFT adapter and the optimiser state into `dir`, atomically (a complete folder or none). */
  async save(dir: string): Promise<void> {
    if (this.closed) throw new McprlError('TRAIN_CLOSED', `trainer for adapter ${this.adapterName} is closed`);
    const [params, m, v] = await this.model.run(() => [this.native.read('params'), this.native.read('exp_avg'), this.native.read('exp_avg_sq')]);
    const state: TrainerState = {
      format: 'mcprl-trainer-state', version: 1, step: this.step, seed: this.config.seed, rng: this.rng.state,
      adapterName: this.adapterName, optimizer: (this.lastOptimizer ?? this.optimizer ?? {}) as Record<string, unknown>, baseModel: this.model.dir,
    };
    await writeDirAtomic(dir, async (tmp) => {
      await writePeftAdapter(tmp, { config: this.peftConfig(), tensors: unpack(this.layout, params) });
      await writeOptimizerState(tmp, state, { expAvg: unpack(this.layout, m), expAvgSq: unpack(this.layout, v) });
    });
  }

  /** Removes the adapter from the model (generation can no longer use it); the trainer is unusable after. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.model.unloadAdapter(this.adapterName);
  }

  private peftConfig() {
    return {
      peft_type: 'LORA' as const, task_type: 'CAUSAL_LM', r: this.config.rank, lora_alpha: this.config.alpha,
      use_rslora: this.config.rslora, target_modules: this.config.targets, base_model_name_or_path: this.model.dir,
    };
  }

  /**
   * A batch whose sequences carry log π_old (sampled turns) and lack it (turns rendered from text: written by the
   * application, or sampled by a policy that kept no logprobs) trains each sequence by the rule a batch of its
   * kind alone follows: one without log π_old takes the policy as it stands before this update, so its ratio is 1.
   * Those are scored here with this adapter, at each sequence's temperature and over its token masks, as the loss
   * will compute log π. SFT reads no log π_old: it is dropped. Other batches are returned as they are.
   */
  private async withOldLogprobs(batch: TrainSequence[], lc: ResolvedLoss): Promise<TrainSequence[]> {
    const lacking = batch.filter((s) => !s.oldLogprobs);
    if (lacking.length === 0 || lacking.length === batch.length) return batch;
    if (lc.kind === 'sft') return batch.map(({ oldLogprobs: _old, ...s }) => s);
    const scored = await this.model.score(lacking.map((s) => s.tokenIds), {
      adapter: this.adapterName, temperatures: lacking.map((s) => s.temperature ?? 1), tokenMasks: lacking.map((s) => s.tokenMasks),
    });
    let k = 0;
    return batch.map((s) => (s.oldLogprobs ? s : { ...s, oldLogprobs: Array.from(scored[k++]) }));
  }

  private checkMasks(batch: TrainSequence[]): void {
    const words = Math.ceil(this.model.config.vocabSize / 32);
    batch.forEach((s, i) => s.tokenMasks?.forEach((m, t) => {
      if (m && m.length !== words) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${i}: token ${t}'s mask has ${m.length} words; the vocabulary of ${this.model.config.vocabSize} needs ${words}`);
    }));
  }

  private async nativeRead(which: 'params' | 'grads' | 'exp_avg' | 'exp_avg_sq'): Promise<Float32Array> {
    if (this.closed) throw new McprlError('TRAIN_CLOSED', `trainer for adapter ${this.adapterName} is closed`);
    try {
      return await this.model.run(() => this.native.read(which));
    } catch (e) {
      throw new McprlError('TRAIN_NATIVE', (e as Error).message, { cause: e });
    }
  }

  private async run(mbs: NativeMicroBatch[], lc: ResolvedLoss, optim: (ResolvedOptimizer & { step: number }) | null, wantLogprobs: boolean, opts: StepOptions): Promise<NativeRunResult> {
    if (this.closed) throw new McprlError('TRAIN_CLOSED', `trainer for adapter ${this.adapterName} is closed`);
    const loss = lossParams(lc);
    try {
      // Queued behind (and ahead of) the model's other native calls: generation never sees half-updated weights.
      return await this.model.run(() => this.native.run(mbs, loss, optim, wantLogprobs, opts.recompute ?? false, opts.foldLora ?? false));
    } catch (e) {
      throw new McprlError('TRAIN_NATIVE', (e as Error).message, { cause: e });
    }
  }
}

function parseOptimizer(o: OptimizerConfig): ResolvedOptimizer {
  const r = OptimizerConfigSchema.safeParse(o);
  if (!r.success) throw new McprlError('TRAIN_INVALID_CONFIG', `optimizer: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  return r.data;
}

function parseLoss(l: LossConfig): ResolvedLoss {
  const r = LossConfigSchema.safeParse(l);
  if (!r.success) throw new McprlError('TRAIN_INVALID_CONFIG', `loss: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  return r.data;
}

function metrics(r: NativeRunResult, totalTokens: number): StepMetrics {
  const n = Math.max(r.tokens, 1);
  return {
    loss: r.loss,
    policyLoss: r.policyLoss,
    kl: r.klSum / n,
    clipFraction: r.clipped / n,
    meanRatio: r.ratioSum / n,
    entropy: r.entropySum / n,
    gradNorm: r.gradNorm,
    trainedTokens: r.tokens,
    tokensPerSecond: r.seconds > 0 ? totalTokens / r.seconds : 0,
  };
}

/** Flat buffer (native layout) from PEFT matrices; every key must be present with its shape. */
function pack(layout: LayoutEntry[], tensors: Map<string, LoraMatrix>, what: string): Float32Array {
  const last = layout[layout.length - 1];
  const out = new Float32Array(last ? last.offset + last.rows * last.cols : 0);
  for (const e of layout) {
    const t = tensors.get(e.key);
    if (!t) throw new McprlError('TRAIN_INVALID_CONFIG', `${what}: missing tensor ${e.key}`);
    if (t.shape[0] !== e.rows || t.shape[1] !== e.cols) throw new McprlError('TRAIN_INVALID_CONFIG', `${what}: tensor ${e.key} has shape [${t.shape}], expected [${e.rows},${e.cols}]`);
    out.set(t.data, e.offset);
  }
  return out;
}

function unpack(layout: LayoutEntry[], flat: Float32Array): Map<string, LoraMatrix> {
  const out = new Map<string, LoraMatrix>();
  for (const e of layout) out.set(e.key, { shape: [e.rows, e.cols], data: flat.slice(e.offset, e.offset + e.rows * e.cols) });
  return out;
}

