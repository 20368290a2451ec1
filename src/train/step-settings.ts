/**
 * The library's settings of a training step and of a trainable model's adapter, each with its one default.
 *
 * The library (src/backend/schemas.ts: TrainStepConfigSchema, LoraSettingsSchema) takes these fields as they are;
 * the MCP·RL job's settings (src/train/config.ts: TrainSettingsSchema) extend them with the job's own (rollouts,
 * curriculum, validation, …). The general library so never takes a default from the job built on it.
 */
import { z } from 'zod';
import { LossConfigSchema } from '../engine/train-types.js';
import { LORA_TARGETS } from '../hf/peft.js';

/** The policy losses: the trainer's loss kinds but supervised fine-tuning (definitions in native/train/loss.h). */
export const PolicyLossSchema = LossConfigSchema.shape.kind.exclude(['sft']);
export type PolicyLoss = z.infer<typeof PolicyLossSchema>;

/** The optimiser and loss settings of a step. */
export const StepSettingsSchema = z.object({
  /** AdamW peak learning rate, per optimiser step. Default 5e-4. */
  lr: z.number().positive().default(5e-4).describe('AdamW learning rate'),
  /** The policy loss. Default grpo. */
  loss: PolicyLossSchema.default('grpo').describe('policy loss'),
  /** KL coefficient β against the base model (k3 estimator; 0 runs no reference forward). Default 0. */
  beta: z.number().nonnegative().default(0).describe('KL coefficient against the base model'),
  /**
   * Optimiser steps per call: the groups are split into this many minibatches (PPO-style; the clipped ratio
   * against the sampling policy keeps the later ones honest). Default 1.
   */
  updates: z.number().int().min(1).default(1).describe("optimiser steps per step: the step's groups split into this many minibatches"),
});

/** The LoRA adapter a model trains. */
export const AdapterSettingsSchema = z.object({
  /** LoRA rank r, at most 65,536 (the trainer's bound). Default 16. */
  rank: z.number().int().positive().max(65_536).default(16).describe('LoRA rank'),
  /** LoRA alpha: the adapter's output is scaled by alpha / r. Default 32. */
  alpha: z.number().positive().default(32).describe('LoRA alpha; the adapter is scaled by alpha/rank'),
  /** Modules that get a LoRA adapter. Default all seven projections (q, k, v, o, gate, up, down). */
  targets: z.array(z.string().min(1)).min(1).default([...LORA_TARGETS]).describe('LoRA target modules, comma-separated'),
  /** Seed of the adapter's initial weights (the job seeds its scenario order and sampling with it too). Default 1. */
  seed: z.number().int().default(1).describe('seed for scenario order, sampling and the adapter'),
});

// The schedule's schema is the trainer's, which computes each optimiser step's rate from it (learningRate).
export { LrScheduleSchema, type LrSchedule } from '../engine/train-types.js';
export { learningRate } from '../engine/trainer.js';
