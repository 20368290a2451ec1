/**
 * The library's data, one zod schema per concept (types derived): a trainable model's settings, a trajectory
 * and a group of them, one training step's settings and its result, and a checkpoint. The same schemas check
 * what `mcprl backend` receives over HTTP, so a local and a remote backend accept exactly the same things.
 *
 * The step's and the adapter's settings, with their defaults, are the library's own (src/train/step-settings.ts);
 * the MCP·RL training job's settings extend them.
 */
import { z } from 'zod';
import { TrajectoryMessageSchema } from '../agent/trajectory.js';
import { OpenAIToolSchema } from '../chat/tool.js';
import { ExportFormatSchema, ExportRequestSchema } from '../export/export-model.js';
import { AdapterSettingsSchema, LrScheduleSchema, StepSettingsSchema } from '../train/step-settings.js';
import { ProgressEventSchema } from '../util/progress.js';

/** A name that is safe as a folder name and as an OpenAI `model` field. */
const NameSchema = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-" only, starting with a letter or digit');

/** LoRA rank (16), alpha (32), target modules (all seven projections) and the initial weights' seed (1). */
export const LoraSettingsSchema = AdapterSettingsSchema;

export const TrainableModelSettingsSchema = z.object({
  /** Groups models: the backend keeps a model under `<dir>/<project>/<name>/`. */
  project: NameSchema,
  /** The model's name; also the `model` field its OpenAI-compatible endpoint answers to. */
  name: NameSchema,
  /**
   * The base model, as the backend's machine sees it: a Hugging Face model folder, or a hub id (`Qwen/Qwen3-4B`)
   * found in that machine's Hugging Face cache and downloaded there when missing (src/hf/hub.ts).
   */
  baseModel: z.string().min(1),
  /** The LoRA adapter trained on top. Default: every field's own default. */
  lora: LoraSettingsSchema.default(LoraSettingsSchema.parse({})),
});
/** Which registered model a call is about: its project and name (also the folder it lives in). */
export const ModelKeySchema = TrainableModelSettingsSchema.pick({ project: true, name: true });
export type ModelKey = z.infer<typeof ModelKeySchema>;

/** Settings as callers write them (defaults may be left out). */
export type TrainableModelSettingsInput = z.input<typeof TrainableModelSettingsSchema>;
export type TrainableModelSettings = z.output<typeof TrainableModelSettingsSchema>;

export const TrajectorySchema = z.object({
  /**
   * The conversation in OpenAI's shape. Assistant turns served by a backend keep the exact sampled token ids
   * and logprobs (`mcprl`), so training never re-tokenises them; turns without them are rendered by the chat
   * template and tokenised (counted in the step's result as `retokenizedTurns`).
   */
  messages: z.array(TrajectoryMessageSchema).min(1),
  /** The tools offered in the conversation. Default none. */
  tools: z.array(OpenAIToolSchema).default([]),
  /** The reward the application assigned; the higher the better. */
  reward: z.number().refine(Number.isFinite, 'must be a finite number'),
  /** Numbers the application wants averaged per step (e.g. `{ win: 1 }`). Default none. */
  metrics: z.record(z.string(), z.number()).default({}),
  /** Anything else the application keeps with the trajectory (not used for training). Default none. */
  metadata: z.record(z.string(), z.unknown()).default({}),
});
export type TrajectoryInput = z.input<typeof TrajectorySchema>;
export type Trajectory = z.output<typeof TrajectorySchema>;

/** A conversation to imitate (supervised fine-tuning): a trajectory without a reward. */
export const SftTrajectorySchema = TrajectorySchema.omit({ reward: true });
export type SftTrajectoryInput = z.input<typeof SftTrajectorySchema>;
export type SftTrajectory = z.output<typeof SftTrajectorySchema>;

/** Attempts at the same task, compared with each other for group-relative advantages. */
export const TrajectoryGroupSchema = z.object({
  trajectories: z.array(TrajectorySchema).min(1),
  /** Anything the application keeps with the group (e.g. the task). Default none. */
  metadata: z.record(z.string(), z.unknown()).default({}),
});
export type TrajectoryGroupInput = z.input<typeof TrajectoryGroupSchema>;
export type TrajectoryGroup = z.output<typeof TrajectoryGroupSchema>;

/** One training step's settings. */
export const TrainStepConfigSchema = StepSettingsSchema.extend({
  // lr (peak, 5e-4), loss (grpo), beta (0) and updates (1) are StepSettingsSchema's.
  /** Clip ε of the importance ratio, below 1 (and above, unless the loss sets its own). Default: the trainer's (0.2). */
  clipEpsilon: z.number().nonnegative().optional(),
  /** Token budget per packed micro-batch. Default: the trainer's (DEFAULT_MICRO_BATCH_TOKENS, 4096). */
  microBatchTokens: z.number().int().positive().optional(),
  /**
   * How the learning rate moves over the model's optimiser steps, `lr` being its peak: constant, linear warm-up,
   * or warm-up then cosine decay to 0 at `totalSteps`. Default constant.
   */
  lrSchedule: LrScheduleSchema,
  /**
   * For trajectories another engine sampled (e.g. a vLLM server): the ratio's old log π is this model's own on the
   * same tokens (before the step), and each token's term is weighted by min(π_model / π_sampler, tisCap), truncated
   * importance sampling (0: every weight 1, the mismatch only measured; see src/train/off-policy.ts). Default
   * unset: the recorded logprobs are the old log π (on-policy, as the backend's own endpoint records them).
   */
  tisCap: z.number().nonnegative().optional(),
  /**
   * Take the step even when no group carries signal: the weights stay, but the step and the optimiser's step count
   * (which the schedule and AdamW's bias correction follow) move on by `updates` and a checkpoint is written, so
   * that the caller's step numbers stay the model's (mcprl train counts every step it gathered). Default false:
   * such a call keeps the step.
   */
  alwaysStep: z.boolean().default(false),
});
export type TrainStepConfigInput = z.input<typeof TrainStepConfigSchema>;
export type TrainStepConfig = z.output<typeof TrainStepConfigSchema>;

/** One supervised step's settings. */
export const SftConfigSchema = TrainStepConfigSchema.pick({ lr: true, microBatchTokens: true });
export type SftConfigInput = z.input<typeof SftConfigSchema>;

/** What one `model.train(groups)` (or `model.sft(trajectories)`) did. */
export const TrainResultSchema = z.object({
  /** The model's step after this call (unchanged when nothing was trained). */
  step: z.number().int().nonnegative(),
  /** False when every group had equal rewards (no signal): no optimiser step, no new checkpoint. */
  trained: z.boolean(),
  /** Groups trained on (0 for SFT). */
  groups: z.number().int().nonnegative(),
  /** Groups dropped because all their rewards were equal. */
  droppedGroups: z.number().int().nonnegative(),
  trajectories: z.number().int().nonnegative(),
  /** Training sequences built (a trajectory gives one or more). */
  sequences: z.number().int().nonnegative(),
  /** Assistant turns without recorded token ids, tokenised from their text instead. */
  retokenizedTurns: z.number().int().nonnegative(),
  /** Assistant turns whose recorded token ids the trainer's own template and tokenizer would not give (drift, counted). */
  tokenIdsDiffer: z.number().int().nonnegative(),
  /** Mean reward over all trajectories of the call (0 for SFT). */
  reward: z.number(),
  /** The trajectories' own metrics, averaged (over the trajectories that have each). */
  metrics: z.record(z.string(), z.number()),
  /** Each group's advantages, aligned with its trajectories; null for a group dropped (equal rewards). Empty for SFT. */
  advantages: z.array(z.array(z.number()).nullable()),
  /** The optimiser step's numbers (absent when nothing was trained). */
  loss: z.number().optional(),
  policyLoss: z.number().optional(),
  kl: z.number().optional(),
  clipFraction: z.number().optional(),
  gradNorm: z.number().optional(),
  entropy: z.number().optional(),
  trainedTokens: z.number().int().nonnegative().optional(),
  /** Mean importance ratio per loss token. */
  meanRatio: z.number().optional(),
  /** Tokens forwarded per second of the trainer's work. */
  tokensPerSecond: z.number().optional(),
  /** The learning rate of the call's last optimiser step. */
  lr: z.number().optional(),
  /** With `tisCap`: how far the sampler's logprobs were from the model's (src/train/off-policy.ts). */
  offPolicy: z.object({
    /** Mean |log π_model − log π_sampler| over the loss tokens whose sampler logprob is known. */
    logprobMismatch: z.number(),
    /** The largest such difference. */
    logprobMismatchMax: z.number(),
    /** Fraction of those tokens whose weight was truncated at the cap. */
    tisTruncated: z.number(),
    /** Mean |w − 1| of those tokens' weights as applied (0 with cap 0, or when sampler and model agree). */
    tisWeightDeviation: z.number(),
    /** Loss tokens without a sampler logprob (re-tokenised turns): weight 1. */
    tokensWithoutSamplerLogprob: z.number().int().nonnegative(),
  }).optional(),
  /** The checkpoint written by this step (absent when nothing was trained, unless `alwaysStep`). */
  checkpoint: z.string().optional(),
});
export type TrainResult = z.infer<typeof TrainResultSchema>;

/**
 * One line of a streamed `POST /backend/train` (or `/backend/sft`) answer, sent as NDJSON when the request asks
 * for `application/x-ndjson`: progress events while the step runs (score: groups, train: sequences, checkpoint),
 * then exactly one `result` or one `error` line.
 */
export const StepStreamLineSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('progress'), event: ProgressEventSchema }),
  z.object({ type: z.literal('result'), result: TrainResultSchema }),
  z.object({
    type: z.literal('error'),
    error: z.object({ message: z.string(), code: z.string(), field: z.string().nullable() }),
  }),
]);
export type StepStreamLine = z.infer<typeof StepStreamLineSchema>;

/** A saved step of a model: a PEFT adapter folder (plus optimiser state). */
export const CheckpointSchema = z.object({
  step: z.number().int().nonnegative(),
  /** The folder, as the backend's machine sees it. */
  dir: z.string(),
  /** The step's TrainResult numbers (reward, loss, …), when recorded. */
  metrics: z.record(z.string(), z.number()),
});
export type Checkpoint = z.infer<typeof CheckpointSchema>;

/** Which checkpoints `deleteCheckpoints` keeps: always the latest, and the best (`best`, else by `metric`). */
export const DeleteCheckpointsSchema = z.object({
  /** A TrainResult number recorded with each step; the highest is the best. Default `reward`. */
  metric: z.string().min(1).default('reward'),
  /** The best step, when the application judges it itself (e.g. by validation); `metric` is then not used. Default unset. */
  best: z.number().int().nonnegative().optional(),
});
export type DeleteCheckpointsInput = z.input<typeof DeleteCheckpointsSchema>;

/** What `model.export()` writes: one checkpoint in one format, under the backend's folder. */
export const ExportOptionsSchema = z.object({
  /** peft (the adapter), merged (base + adapter as one HF folder) or onnx. Default peft. */
  format: ExportFormatSchema.default('peft'),
  /** The checkpoint's step. Default: the latest. */
  step: z.number().int().nonnegative().optional(),
  /** merged only: 'keep' (the base model's dtypes, default) or 'F32'. */
  dtype: ExportRequestSchema.shape.dtype,
  /** onnx only: 'all' positions' logits (default) or the 'last' one's. */
  logits: ExportRequestSchema.shape.logits,
});
export type ExportOptionsInput = z.input<typeof ExportOptionsSchema>;

export const ExportResultSchema = z.object({
  format: ExportFormatSchema,
  step: z.number().int().nonnegative(),
  /** The folder written, as the backend's machine sees it. */
  dir: z.string(),
  /** What was written, in one line. */
  detail: z.string(),
});
export type ExportResult = z.infer<typeof ExportResultSchema>;

/** Where a registered model is served. */
export const ModelEndpointSchema = z.object({
  /** OpenAI-compatible base URL, e.g. `http://127.0.0.1:40123/v1`. */
  baseURL: z.string().url(),
  /** The `model` field to send: the model's name, always served by its newest adapter. */
  inferenceName: z.string(),
  /** The API key the endpoint wants (a placeholder for a loopback LocalBackend). */
  apiKey: z.string(),
  /** The model's step: training steps taken so far. */
  step: z.number().int().nonnegative(),
});
export type ModelEndpoint = z.infer<typeof ModelEndpointSchema>;
