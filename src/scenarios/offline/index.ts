/**
 * Verifiable scenarios with no LLM (`mcprl scenarios --offline`).
 *
 * 1. Discover (discovery.ts): call the server's read-only tools that need no entity (listings, searches with an
 *    empty query, enum filters) and harvest records, ids and names from their output.
 * 2. Draw candidates (rounds.ts): synthesize arguments from each tool's inputSchema, preferring harvested values;
 *    call the tool; turn its real output into a question whose answer is a value from that output. One file per
 *    task shape: lookup, chain, flow, write, find-then-act, make-then-use.
 * 3. Keep (keep.ts, replay.ts): replay every candidate's checks against the server and keep it only if every call
 *    succeeds and every expected value is in the real output again (this also weeds out non-deterministic tools).
 *
 * Only tools annotated `readOnlyHint: true` are ever called, through a guard that throws otherwise (generation.ts);
 * tools that write are replayed on isolated servers only. Everything is reproducible from `seed` (given the same
 * server).
 *
 * Disjoint sets (warm-up / train / val / test): pass `partition: {index, of}`. Each scenario has an entity key
 * (the arguments of its first checked call, e.g. `{"book_id":"bk-007"}`); only scenarios whose key hashes to
 * bucket `index` of `of` are kept, and only phrasing templates with `templateIndex % of === index` are used.
 * So partitions 0–3 of 4 never share an entity key nor a phrasing template. `exclude` additionally
 * rejects scenarios mentioning given entity values or near-duplicating given tasks.
 */
import { discover } from './discovery.js';
import { startGeneration } from './generation.js';
import { Keeper } from './keep.js';
import { eachToolFirst, makeForUncovered, randomShapes } from './rounds.js';
import type { OfflineOptions, OfflineResult, ScenarioServer } from './types.js';

export type { DiscoveredEntity, OfflineOptions, OfflineResult, ScenarioServer } from './types.js';
export { canonical, safeResolve } from './arguments.js';
export { scenarioEntities } from './keep.js';
export { disguisedError } from './output.js';
export { withPlaceholder } from './placeholder.js';
export { replayOnIsolated, type IsolatedReplay } from './replay.js';
export { stateCheckOf, stateReaders, writeEvidence, type StateReader, type WriteEvidence } from './state-checks.js';
export { label } from './wording.js';

/** Generates verifiable scenarios from a server's read-only tools. Never calls any other tool. */
export async function generateOfflineScenarios(userServer: ScenarioServer, opts: OfflineOptions = {}): Promise<OfflineResult> {
  const g = await startGeneration(userServer, opts);
  const known = await discover(g);
  const keeper = new Keeper(g, known);
  const attempts = { n: 0 };
  await eachToolFirst(g, known, keeper, attempts);
  await makeForUncovered(g, known, keeper, attempts);
  await randomShapes(g, known, keeper, attempts);
  return {
    scenarios: keeper.scenarios,
    droppedDuplicates: keeper.droppedDuplicates,
    droppedUnverifiable: keeper.droppedUnverifiable,
    droppedExcluded: keeper.droppedExcluded,
    attempts: attempts.n,
    readOnlyTools: g.tools.map((t) => t.name),
    coverage: g.coverage(keeper.scenarios),
    entities: known.entities,
  };
}
