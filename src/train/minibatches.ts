/**
 * Several optimiser steps on one gathered batch (PPO-style updates per step): the batch's groups are dealt into
 * minibatches, one optimiser step each, and the step's figures are the minibatches' token-weighted means.
 */
import type { StepMetrics } from '../engine/train-types.js';

/** Splits the step's groups (each kept whole) round-robin into at most `n` non-empty minibatches. */
export function minibatches<T>(perGroup: T[][], n: number): T[][] {
  const out: T[][] = Array.from({ length: Math.min(n, perGroup.length) }, () => []);
  perGroup.forEach((g, i) => out[i % out.length].push(...g));
  return out.filter((b) => b.length > 0);
}

/** The figures of several optimiser steps as one: token-weighted means (tokens summed), the last step's lr and step. */
export function meanStepMetrics(all: StepMetrics[]): StepMetrics {
  const tokens = all.reduce((a, m) => a + m.trainedTokens, 0);
  const avg = (f: (m: StepMetrics) => number) => all.reduce((a, m) => a + f(m) * m.trainedTokens, 0) / Math.max(1, tokens);
  return {
    loss: avg((m) => m.loss), policyLoss: avg((m) => m.policyLoss), kl: avg((m) => m.kl), clipFraction: avg((m) => m.clipFraction),
    meanRatio: avg((m) => m.meanRatio), entropy: avg((m) => m.entropy ?? 0), gradNorm: avg((m) => m.gradNorm), trainedTokens: tokens,
    tokensPerSecond: avg((m) => m.tokensPerSecond), lr: all[all.length - 1].lr, step: all[all.length - 1].step,
  };
}
