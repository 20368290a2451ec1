/**
 * LLM tasks grounded in the server (issue 13 §7): the LLM is shown what discovery found on the server, proposes each
 * task's solution as data (tool calls with arguments, and what the answer must contain), and the solution is
 * replayed — read-only calls on the user's server, anything that writes on fresh isolated servers, exactly as
 * offline write tasks are. A task is kept only when the replay shows it feasible, and its checks are the same kinds
 * offline tasks get, made from the replay's real outputs: tool_called with the required values, answer_contains
 * for claimed values the output really holds, and a state check for a write.
 */
import type { ToolCallOutcome, ToolInfo } from '../mcp/index.js';
import type { InfeasibleReason } from './coverage.js';
import { validates } from './json-schema-args.js';
import type { Solution } from './llm.js';
import {
  disguisedError,
  generateOfflineScenarios,
  replayOnIsolated,
  safeResolve,
  stateCheckOf,
  stateReaders,
  withPlaceholder,
  writeEvidence,
  type DiscoveredEntity,
  type OfflineOptions,
  type ScenarioServer,
} from './offline/index.js';
import { answerContains, valueAnswerChecks, type Check } from './scenario.js';

/** What a replay made of a proposed solution: the task's checks, or why it was dropped. */
export type Grounding = { checks: Check[] } | { dropped: InfeasibleReason; detail?: string };

export interface Grounder {
  /** What discovery found (with the tool that showed each), for the prompt. */
  entities: DiscoveredEntity[];
  /** Replays one task's proposed solution. */
  ground(task: string, solution: Solution | undefined): Promise<Grounding>;
}

export interface GrounderOptions {
  /** Seed of discovery (as for offline generation). Default 1. */
  seed?: number;
  /** Opens a fresh isolated server: without it, solutions that write are dropped (writes_need_isolation). */
  isolatedServer?: OfflineOptions['isolatedServer'];
  /** Timeout of one tool call in ms. Default 10000. */
  callTimeoutMs?: number;
}

/**
 * Runs the offline generator's discovery on `userServer` (read-only tools only; a sandboxed target's sandbox is
 * spoken of as `{sandbox}`) and returns what it found with a replayer for proposed solutions.
 */
export async function createGrounder(userServer: ScenarioServer, opts: GrounderOptions = {}): Promise<Grounder> {
  const callTimeoutMs = opts.callTimeoutMs ?? 10_000;
  const { entities } = await generateOfflineScenarios(userServer, { count: 0, seed: opts.seed, callTimeoutMs });
  const server = withPlaceholder(userServer);
  const tools = new Map((await server.listTools()).map((t): [string, ToolInfo] => [t.name, { ...t, inputSchema: safeResolve(t.inputSchema) }]));
  const readTools = [...tools.values()].filter((t) => t.annotations.readOnlyHint === true && (!server.policy || server.policy.check(t, { isolated: true }).allowed));
  const known = new Set(entities.map((e) => String(e.value)));

  async function ground(task: string, solution: Solution | undefined): Promise<Grounding> {
    if (!solution?.calls.length) return { dropped: 'no_solution' };
    for (const c of solution.calls) {
      const tool = tools.get(c.tool);
      if (!tool) return { dropped: 'unknown_tool', detail: c.tool };
      const decision = server.policy?.check(tool, { isolated: true });
      if (decision && !decision.allowed) return { dropped: 'refused_by_policy', detail: c.tool };
      if (!validates(tool.inputSchema, c.arguments)) return { dropped: 'invalid_arguments', detail: c.tool };
    }
    const calls = solution.calls.map((c) => ({ tool: c.tool, args: c.arguments }));
    const writes = calls.filter((c) => tools.get(c.tool)!.annotations.readOnlyHint !== true);
    let outputs: ToolCallOutcome[];
    const checks: Check[] = [];
    if (writes.length) {
      // The user's server is never written: the whole solution runs on a fresh isolated server of its own.
      if (!opts.isolatedServer) return { dropped: 'writes_need_isolation', detail: writes[0].tool };
      const evidence = writeEvidence(writes.map((c) => c.args), (v) => known.has(v));
      const readers = stateReaders(readTools, evidence.readerValues);
      const replayed = await replayOnIsolated(opts.isolatedServer, calls, readers, callTimeoutMs);
      if ('failed' in replayed) return { dropped: 'call_failed', detail: `${replayed.failed}: ${replayed.detail}` };
      const state = stateCheckOf(readers, replayed, evidence);
      if (!state) return { dropped: 'no_state_change', detail: writes.map((c) => c.tool).join(', ') };
      outputs = replayed.outputs;
      // The finding calls of a write task are the agent's business; the write and its effect are checked.
      checks.push(...writes.map((c) => calledCheck(tools.get(c.tool)!, c.args)), state);
    } else {
      outputs = [];
      for (const c of calls) {
        const out = await server.callTool(c.tool, c.args, { timeoutMs: callTimeoutMs });
        const disguised = out.isError ? undefined : disguisedError(out);
        if (out.isError || disguised) return { dropped: 'call_failed', detail: `${c.tool}: ${disguised ?? out.text.slice(0, 200)}` };
        outputs.push(out);
      }
      checks.push(...calls.map((c) => calledCheck(tools.get(c.tool)!, c.args)));
    }
    // A value the task already states is no test of the agent; every other claimed value must be in the real output.
    const text = outputs.map((o) => o.text).join('\n');
    const values = [...new Set(solution.answer_contains.map((v) => v.trim()))].filter((v) => v !== '' && !answerContains(task, v));
    const missing = values.find((v) => !answerContains(text, v));
    if (missing !== undefined) return { dropped: 'answer_not_in_output', detail: missing };
    checks.push(...values.map((value) => ({ kind: 'answer_contains' as const, value })));
    return { checks: valueAnswerChecks(checks, (t) => tools.get(t)?.annotations.readOnlyHint === true) };
  }

  return { entities, ground };
}

/**
 * A tool_called check on the values of the call's required arguments (the optional ones, a limit or a format, are
 * the agent's choice); all of them when the tool requires none.
 */
function calledCheck(tool: ToolInfo, args: Record<string, unknown>): Check {
  const required = ((tool.inputSchema.required as string[] | undefined) ?? []).filter((k) => k in args);
  return { kind: 'tool_called', tool: tool.name, args: required.length ? Object.fromEntries(required.map((k) => [k, args[k]])) : args };
}
