/**
 * The quality table of a scenario set (`mcprl scenarios` prints it; `--json` carries it as `quality`): whether its
 * tasks test what they should. A task should say what to find or change, never which tool to call; its checks
 * should pass for an agent that does the work and fail for one that does nothing; and no single random call should
 * pass them. Computed as data; formatQuality renders it for people.
 */
import { z } from 'zod';
import type { ChatMessage } from '../agent/policy.js';
import type { McpTrajectory } from '../agent/trajectory.js';
import type { ToolInfo } from '../mcp/index.js';
import { synthesizeArgs } from '../scenarios/json-schema-args.js';
import type { ScenarioServer } from '../scenarios/offline/index.js';
import { checkedCalls, isStateCheck, replaceSandbox, type Scenario } from '../scenarios/scenario.js';
import { toolNaming } from '../scenarios/naming.js';
import { createRng, hashString } from '../util/rng.js';
import { scoreChecks } from './checks.js';

const count = z.number().int().nonnegative();

export const ScenarioQualitySchema = z.object({
  /** Scenarios in the set. */
  scenarios: count,
  /**
   * Tasks whose text names one of the server's tools or argument keys, as written or in words (see toolNaming; names
   * of one plain word, such as `echo` or `path`, are ordinary words and not counted alone).
   */
  namingTool: count,
  /** Chains: tasks with a checked call taking a value the task does not state (found by an earlier call). */
  chains: count,
  /**
   * Tasks the agents below were run on: those without a state check whose checked calls are all read-only. The
   * others (write tasks) were replayed on isolated servers when they were made.
   */
  measured: count,
  /** Of `measured`: an oracle (the checked calls, then an answer quoting their results) passes every check, and a
   * do-nothing agent (no call, an empty answer) does not. */
  oraclePassIdleFail: count,
  /**
   * Of `measured`: tasks whose every check a random agent passes — one read-only call with schema-valid random
   * arguments, then its result's text as the answer. Should be none.
   */
  randomPass: count,
});
export type ScenarioQuality = z.infer<typeof ScenarioQualitySchema>;

/** Whether a task is a chain: one of its checked calls takes a value (of 2 characters or more) the task does not state. */
export function isChain(s: Scenario): boolean {
  const task = s.task.toLowerCase();
  const scalars = (v: unknown): string[] =>
    v === null || v === undefined ? [] : Array.isArray(v) ? v.flatMap(scalars) : typeof v === 'object' ? Object.values(v).flatMap(scalars) : [String(v)];
  return checkedCalls(s.checks ?? []).some((c) => scalars(c.args).some((x) => x.trim().length >= 2 && !task.includes(x.trim().toLowerCase())));
}

function trajectory(s: Scenario, calls: { tool: string; args: Record<string, unknown>; text: string }[], answer: string, sandbox?: string): McpTrajectory {
  const messages: ChatMessage[] = calls.flatMap((c, i): ChatMessage[] => [
    { role: 'assistant', content: null, tool_calls: [{ id: `c${i}`, type: 'function', function: { name: c.tool, arguments: JSON.stringify(c.args) } }] },
    { role: 'tool', tool_call_id: `c${i}`, name: c.tool, content: c.text, execution: 'executed' },
  ]);
  return {
    id: `quality-${s.id}`,
    scenario_id: s.id,
    messages,
    tools: [],
    final_answer: answer,
    reward: 0,
    reward_components: {},
    metrics: { turns: calls.length + 1, tool_calls: calls.length, tool_errors: 0, invalid_calls: 0, completed: true, ran_out_of_turns: false, latency_ms: 0 },
    logs: [],
    ...(sandbox !== undefined ? { sandbox } : {}),
  } as McpTrajectory;
}

const passesAll = (t: McpTrajectory, s: Scenario) => {
  const r = scoreChecks(t, s);
  return r.total > 0 && r.passed === r.total;
};

/**
 * Measures a scenario set on a server: the read-only calls of the oracle and of the random agent run on `server`
 * (one random call per measured task, drawn from `seed` and the task's id).
 */
export async function measureQuality(server: ScenarioServer, scenarios: readonly Scenario[], opts: { seed?: number; callTimeoutMs?: number } = {}): Promise<ScenarioQuality> {
  const tools = await server.listTools();
  const readOnly = new Map(tools.filter((t) => t.annotations.readOnlyHint === true).map((t): [string, ToolInfo] => [t.name, t]));
  const sandbox = server.sandboxDir;
  const call = async (tool: string, args: Record<string, unknown>) => {
    const real = sandbox === undefined ? args : replaceSandbox(args, sandbox);
    const out = await server.callTool(tool, real, { timeoutMs: opts.callTimeoutMs ?? 10_000 }).catch((err: Error) => ({ text: `Error: ${err.message}`, isError: true }));
    return { tool, args: real, text: out.text };
  };
  const q: ScenarioQuality = { scenarios: scenarios.length, namingTool: 0, chains: 0, measured: 0, oraclePassIdleFail: 0, randomPass: 0 };
  for (const s of scenarios) {
    if (toolNaming(s.task, tools) !== undefined) q.namingTool++;
    if (isChain(s)) q.chains++;
    const checks = s.checks ?? [];
    const calls = [...new Map(checkedCalls(checks).map((c) => [JSON.stringify(c), c])).values()];
    if (!checks.length || checks.some(isStateCheck) || calls.some((c) => !readOnly.has(c.tool))) continue;
    q.measured++;
    // The oracle: the checked calls, then every result quoted.
    const made = [];
    for (const c of calls) made.push(await call(c.tool, c.args));
    const oracle = passesAll(trajectory(s, made, made.map((m) => m.text).join('\n'), sandbox), s);
    const idle = passesAll(trajectory(s, [], '', sandbox), s);
    if (oracle && !idle) q.oraclePassIdleFail++;
    // The random agent: one read-only call with random valid arguments, its result as the answer.
    if (readOnly.size) {
      const rng = createRng((opts.seed ?? 1) ^ hashString(s.id));
      const tool = rng.pick([...readOnly.values()]);
      let args: Record<string, unknown> = {};
      try {
        args = synthesizeArgs(tool.inputSchema, { rng, optionalRate: 0.3 });
      } catch {
        // A tool whose arguments cannot be drawn is called without any; the server answers with an error.
      }
      const made = await call(tool.name, args);
      if (passesAll(trajectory(s, [made], made.text, sandbox), s)) q.randomPass++;
    }
  }
  return q;
}

/** Human-readable lines of the quality table. */
export function formatQuality(q: ScenarioQuality): string[] {
  return [
    `quality        ${q.scenarios} tasks: ${q.namingTool} name a tool, ${q.chains} chains`,
    `               of ${q.measured} read-only tasks: ${q.oraclePassIdleFail} passed by an oracle and failed by a do-nothing agent, ${q.randomPass} passed by one random call`,
  ];
}
