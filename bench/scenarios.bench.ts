/**
 * The held-out check (src/scenarios/disjoint.ts) on a large scenario set: 50,000 scenarios shaped like generated
 * ones (scripts/large-scenario-set.ts), split by the splitter (2/3 train, 1/3 val), then checked as `mcprl train`
 * checks a set before step 0.
 *
 * scenarios.overlap_check.50k: findOverlaps(val, {train}) over the split set (seconds, one run; it found none).
 * scenarios.split.50k: splitScenarios over the same 50,000 (seconds, one run).
 */
import { performance } from 'node:perf_hooks';
import { findOverlaps } from '../src/scenarios/disjoint.js';
import { splitScenarios } from '../src/scenarios/split.js';
import { largeScenarioSet } from '../scripts/large-scenario-set.js';
import type { Emit } from './run.js';

export default async function scenariosBench(emit: Emit): Promise<void> {
  const set = largeScenarioSet(50_000);
  let t0 = performance.now();
  const { train, val } = splitScenarios(set, { seed: 1 });
  emit('scenarios.split.50k', (performance.now() - t0) / 1000, 's');
  t0 = performance.now();
  const overlaps = findOverlaps(val, { train });
  emit('scenarios.overlap_check.50k', (performance.now() - t0) / 1000, 's');
  if (overlaps.length > 0) throw new Error(`the split set overlaps itself (${overlaps.length} overlaps)`);
}
