/**
 * Off-policy correction for rollouts sampled by another engine (rollout servers, `--rollout-url`).
 *
 * The servers' logprobs are of the sampler: another implementation (vLLM's kernels, bf16), and with stale
 * rollouts an older adapter. Truncated importance sampling (Yao et al., 2025, "Your efficient RL framework
 * secretly brings you off-policy RL training"): the clipped ratio is taken against the trainer's own log π_old on
 * the same tokens, and each token's policy term is weighted by w = min(π_old(trainer) / π_sampler, cap). The
 * mismatch is logged as the mean |Δ logprob| between trainer and sampler over the tokens that have both.
 */
import type { Model } from '../engine/model.js';
import type { TrainSequence } from '../engine/train-types.js';

export interface OffPolicyMetrics {
  /** Mean |log π_trainer − log π_sampler| over the loss tokens whose sampler logprob is known. */
  logprobMismatch: number;
  /** The largest such difference. */
  logprobMismatchMax: number;
  /** Fraction of those tokens whose importance weight was truncated at the cap. */
  tisTruncated: number;
  /** Mean |w − 1| of those tokens' weights as applied (0 with cap 0, or when sampler and trainer agree). */
  tisWeightDeviation: number;
  /** Loss tokens with no sampler logprob (re-tokenised turns): weight 1, old = the trainer's. */
  tokensWithoutSamplerLogprob: number;
}

/**
 * Rewrites `batch` in place for truncated importance sampling: oldLogprobs become the trainer's log π on the same
 * tokens (under `adapter`, before this step's update, at each sequence's temperature and over its token masks) and isWeights the truncated ratios (cap 0: every weight 1,
 * only the mismatch is measured). A sequence without oldLogprobs (a turn was re-tokenised) keeps weight 1.
 */
export async function applyTruncatedIs(model: Model, adapter: string, batch: TrainSequence[], cap: number): Promise<OffPolicyMetrics> {
  // The trainer's log π_old of each sequence is of the distribution its loss will use: at the sequence's
  // temperature, over each token's allowed set (a sampler's tempered, constrained logprobs are compared with that).
  const trainer = await model.score(batch.map((s) => s.tokenIds), {
    adapter, temperatures: batch.map((s) => s.temperature ?? 1), tokenMasks: batch.map((s) => s.tokenMasks),
  });
  let n = 0, sum = 0, max = 0, truncated = 0, without = 0, deviation = 0;
  batch.forEach((s, i) => {
    const lp = trainer[i];
    const sampler = s.oldLogprobs;
    const weights = s.tokenIds.map(() => 1);
    s.mask.forEach((m, t) => {
      if (!m) return;
      if (!sampler) {
        without++;
        return;
      }
      const d = lp[t] - sampler[t];
      n++;
      sum += Math.abs(d);
      max = Math.max(max, Math.abs(d));
      if (cap > 0) {
        const w = Math.exp(d);
        if (w > cap) truncated++;
        weights[t] = Math.min(w, cap);
        deviation += Math.abs(weights[t] - 1);
      }
    });
    s.oldLogprobs = Array.from(lp);
    s.isWeights = weights;
  });
  return { logprobMismatch: n ? sum / n : 0, logprobMismatchMax: max, tisTruncated: n ? truncated / n : 0, tisWeightDeviation: n ? deviation / n : 0, tokensWithoutSamplerLogprob: without };
}
