/**
 * The training API's data types (shared by the trainer and the batch packer; see trainer.ts).
 */
import { z } from 'zod';

export interface TrainSequence {
  tokenIds: number[];
  /** 1 where token t carries loss (assistant tokens), aligned with tokenIds; mask[0] must be 0. */
  mask: number[];
  /** GRPO advantage of this sequence. Default 0. */
  advantage?: number;
  /**
   * log π_old(token t) from sampling, aligned with tokenIds (entry 0 unused). Missing => ratio 1: log π_old is the
   * policy's before the update (in a batch where other sequences carry theirs, scored by the trainer before it).
   */
  oldLogprobs?: number[];
  /**
   * Importance weight of each token's policy term, aligned with tokenIds (entry 0 unused; see native/train/loss.h):
   * truncated importance sampling for tokens another engine sampled. Missing => 1. Given for every sequence of a
   * batch or for none.
   */
  isWeights?: number[];
  /**
   * The sampling temperature: log π of every token is computed from logits ÷ temperature, as the sampler drew
   * them (and as it recorded oldLogprobs). Default 1.
   */
  temperature?: number;
  /**
   * The tokens each token was drawn from, aligned with tokenIds: a bitset over the vocabulary (ceil(V / 32)
   * words; see TokenConstraint in model.ts) or null for the whole vocabulary. log π of token t is then
   * renormalised over tokenMasks[t], as constrained decoding sampled it. Default: no masks. Sequences may share
   * one mask object; it is sent to the engine once per micro-batch.
   */
  tokenMasks?: (Uint32Array | null)[];
}

/** Token budget per packed micro-batch when a step gives none (the library's TrainStepConfig and the trainer). */
export const DEFAULT_MICRO_BATCH_TOKENS = 4096;

// The loss and optimiser settings carry every default here, once: the native trainer receives each value
// explicitly (lossParams; the resolved optimiser settings as they are) and has no defaults of its own.

export const LossConfigSchema = z.object({
  kind: z.enum(['grpo', 'dapo', 'dr_grpo', 'cispo', 'gspo', 'sft']),
  /** Clip ε below 1 (and above 1 unless clipEpsilonHigh is given), a ratio offset. Default 0.2. */
  clipEpsilon: z.number().nonnegative().default(0.2),
  /** Clip ε above 1, a ratio offset. Default 0.28 for dapo, else clipEpsilon. */
  clipEpsilonHigh: z.number().nonnegative().optional(),
  /** KL coefficient (k3 estimator against the adapter-free model). Default 0 (no reference forward). */
  beta: z.number().nonnegative().default(0),
  /** CISPO's cap on the stop-gradient importance weight (a ratio). Default 5. */
  cispoEpsMax: z.number().positive().default(5),
  /** dr_grpo's normaliser, in loss tokens. Default: the most loss tokens of any sequence in the batch. */
  maxLength: z.number().int().positive().optional(),
});
/** A loss as callers write it (defaults may be left out). */
export type LossConfig = z.input<typeof LossConfigSchema>;
/** A loss with its defaults applied. */
export type ResolvedLoss = z.output<typeof LossConfigSchema>;

/** The loss settings exactly as the native trainer reads them (native/train/train_napi.cc): every field. */
export function lossParams(l: ResolvedLoss): { kind: ResolvedLoss['kind']; epsLow: number; epsHigh: number; beta: number; cispoEpsMax: number } {
  return {
    kind: l.kind,
    epsLow: l.clipEpsilon,
    epsHigh: l.clipEpsilonHigh ?? (l.kind === 'dapo' ? 0.28 : l.clipEpsilon),
    beta: l.beta,
    cispoEpsMax: l.cispoEpsMax,
  };
}

export const OptimizerConfigSchema = z.object({
  /** The step's learning rate, or a schedule's peak (TrainStepOptions.schedule). Required: the library's step settings hold its default. */
  lr: z.number().nonnegative(),
  /** AdamW's first-moment decay. Default 0.9. */
  beta1: z.number().min(0).max(1).default(0.9),
  /** AdamW's second-moment decay. Default 0.99. */
  beta2: z.number().min(0).max(1).default(0.99),
  /** AdamW's denominator epsilon. Default 1e-8. */
  eps: z.number().positive().default(1e-8),
  /** Decoupled weight decay, per unit of learning rate. Default 0. */
  weightDecay: z.number().nonnegative().default(0),
  /** Global L2 gradient-norm clip; 0 disables. Default 1.0. */
  maxGradNorm: z.number().nonnegative().default(1.0),
});
/** Optimiser settings as callers write them (defaults may be left out). */
export type OptimizerConfig = z.input<typeof OptimizerConfigSchema>;
/**
 * Optimiser settings with their defaults applied: every field the native trainer reads for one AdamW step
 * (native/train/train_napi.cc), under the same names, with the step's number beside them.
 */
export type ResolvedOptimizer = z.output<typeof OptimizerConfigSchema>;

/**
 * How the learning rate moves over a trainer's optimiser steps, the step's `lr` being its peak: constant, linear
 * warm-up, or warm-up then cosine decay to 0 at `totalSteps` (learningRate in src/engine/trainer.ts). Default constant.
 */
export const LrScheduleSchema = z.object({
  kind: z.enum(['constant', 'warmup', 'cosine']),
  /** Steps of linear warm-up (the first step uses lr / warmupSteps). Default 0. */
  warmupSteps: z.number().int().nonnegative().default(0),
  /** Cosine decay reaches 0 at this step. Required for cosine. */
  totalSteps: z.number().int().positive().optional(),
}).refine((s) => s.kind !== 'cosine' || s.totalSteps !== undefined, { message: 'cosine schedule needs totalSteps', path: ['totalSteps'] })
  .default({ kind: 'constant', warmupSteps: 0 });
export type LrSchedule = z.output<typeof LrScheduleSchema>;

export interface StepMetrics {
  /** Total loss (policy + β·KL), as defined for the loss kind. */
  loss: number;
  policyLoss: number;
  /** Mean k3 KL estimate per loss token (0 when β = 0: no reference forward is run). */
  kl: number;
  /** Fraction of loss tokens whose ratio was clipped (cispo: capped). */
  clipFraction: number;
  /** Mean importance ratio per loss token (gspo: the sequence ratio). */
  meanRatio: number;
  /** Mean entropy of the policy over the loss tokens' positions (nats). */
  entropy?: number;
  /** Global gradient L2 norm before clipping. */
  gradNorm: number;
  /** Tokens that carried loss. */
  trainedTokens: number;
  /** All tokens forwarded (prompts included), per second of native work. */
  tokensPerSecond: number;
  /** Learning rate used by this step (absent for computeGradients). */
  lr?: number;
  /** Optimiser steps taken so far, this one included. */
  step?: number;
}
