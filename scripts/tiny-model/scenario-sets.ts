/**
 * The three disjoint scenario sets of the tiny model, all drawn offline from the bookshop fixture server:
 * warm-up (the SFT transcripts), RL training (what `npm run demo` trains on) and validation (held out).
 * They are partitions 0, 1 and 2 of 3 of the offline generator: no entity key and no phrasing template is shared
 * (see src/scenarios/offline.ts); `mcprl train` checks the disjointness again before it trains.
 *
 * Only scenarios a model can solve from what it reads are kept: the arguments of the first checked call are in
 * the task text, and the task names what the checked tool is about (a "stock" question for check_stock), so
 * that the one tool the check accepts is the one the task points to. Each tool gets at most a share of the
 * warm-up set, so that the tool with endless argument values (convert_price) does not crowd out the others — though its many
 * distinct numbers are what teaches a small model to copy values rather than memorise them.
 */
import { generateOfflineScenarios, type Scenario, type ScenarioServer } from '../../src/scenarios/index.js';

export interface ScenarioSets {
  warmup: Scenario[];
  train: Scenario[];
  val: Scenario[];
}

const VERBS = new Set(['get', 'list', 'search', 'check', 'convert', 'find']);

function toolCalls(s: Scenario) {
  return (s.checks ?? []).flatMap((c) => (c.kind === 'tool_called' ? [c] : []));
}

/** The first checked call's arguments are stated in the task, and the task mentions what each tool is about. */
export function solvableFromTask(s: Scenario): boolean {
  const calls = toolCalls(s);
  if (calls.length === 0 || calls.length > 2) return false;
  const task = s.task.toLowerCase();
  const stated = Object.values(calls[0].args).every((v) => task.includes(String(v).toLowerCase()));
  const named = calls.every((c) => c.tool.split('_').filter((w) => !VERBS.has(w)).every((w) => task.includes(w.replace(/s$/, ''))));
  return stated && named;
}

function capPerTool(xs: Scenario[], cap: number): Scenario[] {
  const seen = new Map<string, number>();
  return xs.filter((s) => {
    const key = toolCalls(s).map((c) => c.tool).join('+');
    const n = (seen.get(key) ?? 0) + 1;
    seen.set(key, n);
    return n <= cap;
  });
}

export async function makeScenarioSets(server: ScenarioServer, seed: number, sizes = { warmup: 400, train: 48, val: 24 }): Promise<ScenarioSets> {
  const pick = async (index: number, count: number, cap = count) => {
    const r = await generateOfflineScenarios(server, { count: count * 4, seed: seed + index, partition: { index, of: 3 } });
    return capPerTool(r.scenarios.filter(solvableFromTask), cap).slice(0, count);
  };
  const warmup = await pick(0, sizes.warmup, Math.ceil(sizes.warmup / 2));
  const train = await pick(1, sizes.train);
  const val = await pick(2, sizes.val);
  return { warmup, train, val };
}
