import { createRng } from '../util/rng.js';
import { overlapGroups } from './disjoint.js';
import type { Scenario } from './scenario.js';

/** Default share of scenarios held out for validation (ART uses 16 train / 8 val). */
export const DEFAULT_VAL_FRACTION = 1 / 3;

/**
 * Splits scenarios into train and val deterministically by seed, keeping apart what the held-out check
 * (disjoint.ts) keeps apart: scenarios that overlap (the same entity, or near-duplicate tasks) form a group, and
 * every group goes whole to one side, so a split set always passes the check. The groups are shuffled by seed and
 * val takes, in that order, each group that still fits in round(n · valFraction) scenarios (at least one group when
 * there are two or more and valFraction > 0). A set without overlaps splits exactly as a shuffle of its scenarios. Each side keeps the original order of its scenarios, so files are stable
 * and easy to diff.
 */
export function splitScenarios(
  scenarios: readonly Scenario[],
  opts: { valFraction?: number; seed?: number } = {},
): { train: Scenario[]; val: Scenario[] } {
  const fraction = opts.valFraction ?? DEFAULT_VAL_FRACTION;
  if (!(fraction >= 0 && fraction < 1)) throw new RangeError(`valFraction must be in [0, 1), got ${fraction}`);
  const groups = overlapGroups(scenarios);
  let nVal = Math.round(scenarios.length * fraction);
  if (fraction > 0 && nVal === 0 && scenarios.length >= 2) nVal = 1;
  const order = createRng(opts.seed ?? 1).shuffle(groups.map((_, i) => i));
  const valIdx = new Set<number>();
  for (const g of order) {
    if (valIdx.size + groups[g].length > nVal) continue;
    for (const i of groups[g]) valIdx.add(i);
  }
  // Groups larger than the share could leave val empty: then it takes the smallest group, if train keeps one.
  if (nVal > 0 && valIdx.size === 0 && groups.length >= 2) {
    const smallest = order.reduce((a, g) => (groups[g].length < groups[a].length ? g : a), order[0]);
    for (const i of groups[smallest]) valIdx.add(i);
  }
  return {
    train: scenarios.filter((_, i) => !valIdx.has(i)),
    val: scenarios.filter((_, i) => valIdx.has(i)),
  };
}
