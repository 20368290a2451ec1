/**
 * What every stage of one generation shares: its settings and random draws, the server's tools sorted by what
 * they may do, the one guarded way to call them, and the notes on how far each tool got (for the coverage report).
 */
import type { ToolCallOutcome, ToolInfo } from '../../mcp/index.js';
import { McprlError, oneLine } from '../../util/errors.js';
import { createRng, type Rng } from '../../util/rng.js';
import { scenariosPerTool, type NoScenarioReason, type ToolCoverage } from '../coverage.js';
import { isStateCheck, type Scenario } from '../scenario.js';
import { canonical, safeResolve } from './arguments.js';
import { disguisedError } from './output.js';
import { withPlaceholder } from './placeholder.js';
import type { OfflineOptions, ScenarioServer } from './types.js';
import { templateRenderer, type Fill, type TemplateFamily } from './wording.js';

export interface Generation {
  readonly opts: OfflineOptions;
  readonly count: number;
  readonly partition: OfflineOptions['partition'];
  readonly rng: Rng;
  readonly callTimeoutMs: number;
  readonly maxAttempts: number;
  /** The read-only tools (schemas resolved): the only ones generation calls itself. */
  readonly tools: ToolInfo[];
  /** The tools that write, when an isolated server is given (schemas resolved): replayed there only. */
  readonly writeTools: ToolInfo[];
  readonly byName: ReadonlyMap<string, ToolInfo>;
  /** Tools that timed out: not called again. */
  readonly disabled: Set<string>;
  /** Argument sets that failed, per tool (`tool args`): a later draw takes others. */
  readonly failedArgs: Set<string>;
  /** Calls a read-only tool (cached unless `fresh`); an error in disguise comes back as an error. */
  call(name: string, args: Record<string, unknown>, fresh?: boolean): Promise<ToolCallOutcome>;
  /**
   * Notes where a candidate of `tool` stopped: a tool with no scenario is reported with the stage its candidates
   * stopped at most often (ties: the furthest), every stage with its count, and the detail given (the last error of
   * failed calls, what no argument could be found for).
   */
  note(tool: string, reason: NoScenarioReason, detail?: string): void;
  /** Per tool of the server: scenarios made, and for a tool with none, why. */
  coverage(scenarios: Scenario[]): ToolCoverage[];
  /** The read-only tools still in use (none that timed out). */
  usableTools(): ToolInfo[];
  /** A tool among those of `pool` drawn least so far, so that none is left out. */
  leastTried(pool: readonly ToolInfo[]): ToolInfo;
  render(family: TemplateFamily, fill: Fill): string;
}

/** The stages a candidate passes, in order: of stages noted equally often, a tool is reported with the furthest. */
const STAGES: NoScenarioReason[] = ['no_discoverable_arguments', 'calls_failed', 'nothing_to_ask', 'only_duplicates', 'replay_failed'];

/** Checks the options, lists the server's tools and sorts them by what generation may do with them. */
export async function startGeneration(userServer: ScenarioServer, opts: OfflineOptions): Promise<Generation> {
  const server = withPlaceholder(userServer);
  const count = opts.count ?? 24;
  const seed = opts.seed ?? 1;
  const partition = opts.partition;
  if (partition && !(Number.isInteger(partition.of) && partition.of >= 1 && partition.index >= 0 && partition.index < partition.of)) {
    throw new RangeError(`partition must satisfy 0 <= index < of, got ${JSON.stringify(partition)}`);
  }
  const rng = createRng(seed);
  const callTimeoutMs = opts.callTimeoutMs ?? 10_000;
  const maxAttempts = opts.maxAttempts ?? (10 * count + 50) * (partition?.of ?? 1);

  const allTools = await server.listTools();
  // Tools left out from the start, and for the others how many of their candidates stopped at each stage.
  const excluded = new Map<string, { reason: NoScenarioReason; detail?: string }>();
  const stopped = new Map<string, Map<NoScenarioReason, number>>();
  /** The last detail noted with a failed call or missing arguments (an error, a missing kind of value). */
  const lastError = new Map<string, string>();
  const { tools, writeTools } = sortTools(server, allTools, opts, excluded);
  const byName = new Map(tools.map((t) => [t.name, t]));
  const disabled = new Set<string>();
  /** How many candidates were drawn for each tool. */
  const tried = new Map<string, number>();
  return {
    opts,
    count,
    partition,
    rng,
    callTimeoutMs,
    maxAttempts,
    tools,
    writeTools,
    byName,
    disabled,
    failedArgs: new Set<string>(),
    call: guardedCall(server, byName, callTimeoutMs, disabled, excluded),
    note(tool, reason, detail) {
      const counts = stopped.get(tool) ?? new Map<NoScenarioReason, number>();
      stopped.set(tool, counts.set(reason, (counts.get(reason) ?? 0) + 1));
      if ((reason === 'calls_failed' || reason === 'no_discoverable_arguments') && detail) lastError.set(`${tool} ${reason}`, oneLine(detail).slice(0, 200));
    },
    coverage: (scenarios) => coverageOf(allTools, scenarios, excluded, stopped, lastError),
    usableTools: () => tools.filter((t) => !disabled.has(t.name)),
    leastTried(pool) {
      const fewest = Math.min(...pool.map((t) => tried.get(t.name) ?? 0));
      const tool = rng.pick(pool.filter((t) => (tried.get(t.name) ?? 0) === fewest));
      tried.set(tool.name, fewest + 1);
      return tool;
    },
    render: templateRenderer(rng, partition),
  };
}

/** The read-only tools and the write tools generation may use; the others go to `excluded`, with why. */
function sortTools(
  server: ScenarioServer,
  allTools: ToolInfo[],
  opts: OfflineOptions,
  excluded: Map<string, { reason: NoScenarioReason; detail?: string }>,
): { tools: ToolInfo[]; writeTools: ToolInfo[] } {
  const tools: ToolInfo[] = [];
  const writeTools: ToolInfo[] = [];
  for (const t of allTools) {
    if (server.policy && !server.policy.check(t, { isolated: true }).allowed) excluded.set(t.name, { reason: 'refused_by_policy' });
    else if (t.annotations.readOnlyHint !== true && !opts.isolatedServer) excluded.set(t.name, { reason: 'writes_state', detail: 'write tasks need --isolate on a {sandbox} or --state-in-memory' });
    else if (t.annotations.readOnlyHint !== true) writeTools.push({ ...t, inputSchema: safeResolve(t.inputSchema) });
    else tools.push({ ...t, inputSchema: safeResolve(t.inputSchema) });
  }
  return { tools, writeTools };
}

/** The only way generation calls the user's server: read-only tools, bounded time, cached within generation. */
function guardedCall(
  server: ScenarioServer,
  byName: ReadonlyMap<string, ToolInfo>,
  callTimeoutMs: number,
  disabled: Set<string>,
  excluded: Map<string, { reason: NoScenarioReason; detail?: string }>,
): Generation['call'] {
  const cache = new Map<string, ToolCallOutcome>();
  return async (name, args, fresh = false) => {
    const tool = byName.get(name);
    if (!tool || tool.annotations.readOnlyHint !== true) {
      // Generation only ever picks read-only tools; getting here is a bug, and calling the tool could change data.
      throw new McprlError('READ_ONLY_VIOLATION', `refusing to call ${name} while generating scenarios: it is not annotated readOnlyHint: true`);
    }
    const key = `${name} ${canonical(args)}`;
    if (!fresh && cache.has(key)) return cache.get(key)!;
    let out = await server.callTool(name, args, { timeoutMs: callTimeoutMs });
    if (out.isError && out.latencyMs >= callTimeoutMs * 0.9) {
      disabled.add(name);
      excluded.set(name, { reason: 'timed_out', detail: `after ${callTimeoutMs} ms` });
    }
    // An error in disguise is an error: it is never harvested nor made a ground truth.
    if (!out.isError && disguisedError(out)) out = { ...out, isError: true };
    if (!fresh) cache.set(key, out);
    return out;
  };
}

function coverageOf(
  tools: ToolInfo[],
  scenarios: Scenario[],
  excluded: Map<string, { reason: NoScenarioReason; detail?: string }>,
  stopped: ReadonlyMap<string, ReadonlyMap<NoScenarioReason, number>>,
  lastError: ReadonlyMap<string, string>,
): ToolCoverage[] {
  const made = scenariosPerTool(scenarios);
  const stateChecked = scenariosPerTool(scenarios.filter((s) => s.checks?.some(isStateCheck)));
  return tools.map((t) => {
    const n = made.get(t.name) ?? 0;
    if (n > 0) return { tool: t.name, scenarios: n, stateChecked: stateChecked.get(t.name) ?? 0 };
    const counts = [...(stopped.get(t.name) ?? [])];
    // The commonest stage, and of those noted equally often the furthest.
    const reason = counts.length ? counts.sort((a, b) => b[1] - a[1] || STAGES.indexOf(b[0]) - STAGES.indexOf(a[0]))[0][0] : 'not_tried';
    const detail = lastError.get(`${t.name} ${reason}`);
    const reasons = counts.length ? { reasons: Object.fromEntries(counts) } : {};
    return { tool: t.name, scenarios: 0, stateChecked: 0, ...(excluded.get(t.name) ?? { reason, ...reasons, ...(detail ? { detail } : {}) }) };
  });
}
