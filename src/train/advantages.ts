/**
 * Group-relative advantages (GRPO): each rollout is compared with the other attempts at the same scenario.
 * A group whose rewards are all equal carries no learning signal, so it is dropped and counted.
 */
import type { PolicyLoss } from './config.js';

export interface AdvantageOptions {
  /** Divide by the group's standard deviation (+ epsilon), as in the original GRPO. Default true. */
  normalizeStd?: boolean;
  /** Added to the standard deviation before dividing. Default 1e-6. */
  epsilon?: number;
  /** Rewards closer than this count as equal when deciding that a group has zero variance. Default 1e-9. */
  zeroVarianceTolerance?: number;
}

export interface GroupAdvantages {
  /** One array per kept group, aligned with that group's rewards. */
  advantages: number[][];
  /** Indices (into the input) of the groups kept. */
  kept: number[];
  /** How many groups were dropped because every reward in them was the same. */
  droppedZeroVariance: number;
}

export function groupAdvantages(rewardGroups: readonly (readonly number[])[], opts: AdvantageOptions = {}): GroupAdvantages {
  const normalize = opts.normalizeStd ?? true;
  const eps = opts.epsilon ?? 1e-6;
  const tol = opts.zeroVarianceTolerance ?? 1e-9;
  const out: GroupAdvantages = { advantages: [], kept: [], droppedZeroVariance: 0 };
  rewardGroups.forEach((rewards, g) => {
    if (rewards.length === 0) return;
    for (const r of rewards) if (!Number.isFinite(r)) throw new RangeError(`group ${g}: reward ${r} is not a finite number`);
    const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
    const variance = rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / rewards.length;
    if (Math.max(...rewards) - Math.min(...rewards) <= tol) {
      out.droppedZeroVariance++;
      return;
    }
    const scale = normalize ? 1 / (Math.sqrt(variance) + eps) : 1;
    out.advantages.push(rewards.map((r) => (r - mean) * scale));
    out.kept.push(g);
  });
  return out;
}

/**
 * The advantages a policy loss trains on. Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training")
 * removes the division by the group's standard deviation, which up-weights groups whose rewards barely differ;
 * it keeps A = r − mean(r). Every other loss divides by the standard deviation, as the original GRPO does.
 */
export function advantagesFor(loss: PolicyLoss, rewardGroups: readonly (readonly number[])[]): GroupAdvantages {
  return groupAdvantages(rewardGroups, { normalizeStd: loss !== 'dr_grpo' });
}
