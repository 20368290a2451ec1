/**
 * The four disjoint scenario sets of the tiny model, all drawn offline from the bookshop fixture server:
 * warm-up (the SFT transcripts), RL training (what `npm run demo` trains on), validation (selects the checkpoint,
 * drives early stopping) and test (reported, never used for a decision). They are partitions 0–3 of 4 of the
 * offline generator: no entity key and no phrasing template is shared (see src/scenarios/offline/index.ts); `mcprl
 * train` checks the disjointness again before it trains.
 *
 * Only fair scenarios are kept: a model must be able to tell from the task alone which tools the check accepts —
 * the task names what each checked tool is about (a "stock" question for check_stock, never for get_book, whose
 * record also holds the stock), and every argument of the checked calls is either stated in the task or an id
 * that a lookup of an entity named in the task returns (a chain: search the quoted title, then get the book).
 *
 * Training, validation and test are drawn across the server's surface in fixed shares: one stratum per checked
 * tool sequence and difficulty (lookups, searches, conversions, chains, flows), taken round-robin, so that no
 * kind of task dominates and chains are in every set. The warm-up set caps each stratum instead, so that the tool
 * with endless argument values (convert_price) does not crowd out the others.
 */
import { generateOfflineScenarios, type Scenario, type ScenarioServer } from '../../src/scenarios/index.js';

export interface ScenarioSets {
  warmup: Scenario[];
  train: Scenario[];
  val: Scenario[];
  test: Scenario[];
}

export const DEFAULT_SET_SIZES = { warmup: 600, train: 96, val: 48, test: 48 };

const VERBS = new Set(['get', 'list', 'search', 'check', 'convert', 'find']);

/**
 * How a scenario's calls are read. `checked`: its `tool_called` checks only (the bookshop recipe, as the bundled
 * sets were drawn). `via`: a task checked by the value it asks for (`answer_value`, which the generator writes
 * instead of a checked call for a question) counts the call that value was read from, so questions are kept too
 * (the general recipe).
 */
export type CallsFrom = 'checked' | 'via';

function toolCalls(s: Scenario, from: CallsFrom = 'checked'): { tool: string; args: Record<string, unknown> }[] {
  const checked = (s.checks ?? []).flatMap((c) => (c.kind === 'tool_called' ? [c] : []));
  if (checked.length > 0 || from === 'checked') return checked;
  const via = (s.checks ?? []).flatMap((c) => (c.kind === 'answer_value' && c.via?.length ? [c.via[0]] : []));
  return [...new Map(via.map((c) => [`${c.tool} ${JSON.stringify(c.args)}`, c])).values()];
}

/** The stratum of a scenario: its checked tools in order and its difficulty ("get_book+convert_price d4"). */
export function stratum(s: Scenario, from: CallsFrom = 'checked'): string {
  return `${toolCalls(s, from).map((c) => c.tool).join('+')} d${s.difficulty}`;
}

/** A string argument that is an id (`bk-013`, `au-09`): a chain may find it by a lookup instead of the task stating it. */
const ID_VALUE = /^[a-z]{2}-\d+$/;

/** See the module comment: the task tells which tools are meant, and states or names everything they need. */
export function fairScenario(s: Scenario, from: CallsFrom = 'checked'): boolean {
  const calls = toolCalls(s, from);
  if (calls.length === 0 || calls.length > 2) return false;
  const task = s.task.toLowerCase();
  const named = calls.every((c) => c.tool.split('_').filter((w) => !VERBS.has(w)).every((w) => task.includes(w.replace(/s$/, ''))));
  const stockAsked = /\bstock\b/.test(task);
  const stockTool = calls.some((c) => c.tool === 'check_stock');
  if (!named || stockAsked !== stockTool) return false;
  const chain = s.difficulty >= 3;
  const quoted = /"[^"]+"/.test(s.task);
  return calls.every((c, i) =>
    Object.values(c.args).every((v) => {
      const text = String(v).toLowerCase();
      if (task.includes(text)) return true;
      if (chain && i === 0 && typeof v === 'string' && ID_VALUE.test(v)) return quoted; // found by the quoted label
      return chain && i > 0; // a flow's second call takes a value the first call returned
    }),
  );
}

function capPerStratum(xs: Scenario[], cap: number, from: CallsFrom): Scenario[] {
  const seen = new Map<string, number>();
  return xs.filter((s) => {
    const n = (seen.get(stratum(s, from)) ?? 0) + 1;
    seen.set(stratum(s, from), n);
    return n <= cap;
  });
}

/** `count` scenarios taken round-robin over the strata (sorted by name), each stratum in generation order. */
export function roundRobin(xs: Scenario[], count: number, from: CallsFrom = 'checked'): Scenario[] {
  const by = new Map<string, Scenario[]>();
  for (const s of xs) by.set(stratum(s, from), [...(by.get(stratum(s, from)) ?? []), s]);
  const queues = [...by.keys()].sort().map((k) => by.get(k)!);
  const out: Scenario[] = [];
  for (let round = 0; out.length < count && queues.some((q) => q.length > round); round++) {
    for (const q of queues) if (q.length > round && out.length < count) out.push(q[round]);
  }
  return out;
}

/** Warm-up scenarios of another server (a made-up catalogue): the warm-up partition's templates, capped per stratum. */
export async function drawWarmup(server: ScenarioServer, seed: number, count: number, from: CallsFrom = 'checked'): Promise<Scenario[]> {
  const r = await generateOfflineScenarios(server, { count: Math.max(400, count * 4), seed, partition: { index: 0, of: 4 } });
  return capPerStratum(r.scenarios.filter((s) => fairScenario(s, from)), Math.ceil(count / 4), from).slice(0, count);
}

export async function makeScenarioSets(server: ScenarioServer, seed: number, sizes = DEFAULT_SET_SIZES, from: CallsFrom = 'checked'): Promise<ScenarioSets> {
  const draw = async (index: number, count: number) => {
    const r = await generateOfflineScenarios(server, { count: Math.max(400, count * 4), seed: seed + index, partition: { index, of: 4 } });
    return r.scenarios.filter((s) => fairScenario(s, from));
  };
  const warmup = capPerStratum(await draw(0, sizes.warmup), Math.ceil(sizes.warmup / 4), from).slice(0, sizes.warmup);
  const train = roundRobin(await draw(1, sizes.train), sizes.train, from);
  const val = roundRobin(await draw(2, sizes.val), sizes.val, from);
  const test = roundRobin(await draw(3, sizes.test), sizes.test, from);
  return { warmup, train, val, test };
}
