import { createRng } from '../util/rng.js';
import type { Scenario } from './scenario.js';

/** Default share of scenarios held out for validation (ART uses 16 train / 8 val). */
export const DEFAULT_VAL_FRACTION = 1 / 3;

/**
 * Splits scenarios into train and val deterministically by seed: a seeded shuffle, then the first
 * round(n · valFraction) go to val (at least one when there are two or more scenarios and valFraction > 0).
 * Each side keeps the original order of its scenarios, so files are stable and easy to diff.
 */
export function splitScenarios(
  scenarios: readonly Scenario[],
  opts: { valFraction?: number; seed?: number } = {},
): { train: Scenario[]; val: Scenario[] } {
  const fraction = opts.valFraction ?? DEFAULT_VAL_FRACTION;
  if (!(fraction >= 0 && fraction < 1)) throw new RangeError(`valFraction must be in [0, 1), got ${fraction}`);
  let nVal = Math.round(scenarios.length * fraction);
  if (fraction > 0 && nVal === 0 && scenarios.length >= 2) nVal = 1;
  const order = createRng(opts.seed ?? 1).shuffle(scenarios.map((_, i) => i));
  const valIdx = new Set(order.slice(0, nVal));
  return {
    train: scenarios.filter((_, i) => !valIdx.has(i)),
    val: scenarios.filter((_, i) => valIdx.has(i)),
  };
}
