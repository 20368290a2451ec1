/**
 * K rollouts of every scenario against a target, each group's attempts together: the connections they share or
 * each open (isolation, sandboxes), the check that the scenarios' tools exist, and trajectories for rollouts that
 * never started.
 */
import pLimit from 'p-limit';
import {
  checkSandboxFrom,
  connect,
  type ConnectOptions,
  type McpSession,
  type SafetyPolicy,
  type Target,
  type ToolInfo,
} from '../mcp/index.js';
import { checkScenarioTools, type Scenario } from '../scenarios/scenario.js';
import type { Policy } from './policy.js';
import { COMPLETE_TASK, DEFAULT_SYSTEM_PROMPT, rollout, type RolloutOptions } from './rollout.js';
import type { McpTrajectory } from './trajectory.js';
import { startSpan, withinSpan, type TraceSpan } from '../util/tracing.js';

/** The settings each rollout takes as they are (documented on RolloutOptions); `seed` is the group's base seed here. */
type PerRollout = Pick<RolloutOptions, 'systemPrompt' | 'maxTurns' | 'callTimeoutMs' | 'rolloutTimeoutMs'>;

export interface RolloutGroupsOptions extends PerRollout {
  policy: Policy;
  target: Target;
  scenarios: Scenario[];
  /** K: attempts per scenario; the attempts at one scenario form a group. */
  rolloutsPerGroup: number;
  /** Rollouts in flight at once, across all groups. */
  concurrency: number;
  /**
   * Start a fresh server process for every rollout (stdio targets only), each with its own `{sandbox}` (see
   * src/mcp/sandbox.ts), so what a writing tool did in one attempt cannot leak into another nor reach the user's
   * data. Tools that write run only when the target also names `{sandbox}` or is declared in-memory
   * (`stateInMemory`), or with the policy's allowUnisolatedWrites. Without it, stdio rollouts share one server
   * process (one connection; MCP multiplexes requests) and HTTP rollouts each open their own connection to the one
   * server.
   */
  isolate?: boolean;
  /** Copied into every `{sandbox}`; the target must name one (see src/mcp/sandbox.ts). Default: sandboxes start empty. */
  sandboxFrom?: string;
  /** The user's word that the target keeps its state in memory only (IsolationSchema.stateInMemory). Default false. */
  stateInMemory?: boolean;
  /** Which tools may run. Default: src/mcp's default SafetyPolicy (no destructive tools). */
  policyForSafety?: SafetyPolicy;
  /** Base seed; rollout k of a group gets seed + k so that the attempts differ. */
  seed?: number;
  /** Connect/initialize timeout in milliseconds. Default 30000. */
  connectTimeoutMs?: number;
  /** Output cap of one tool result in characters. Default: src/mcp's. */
  maxOutputChars?: number;
  /** Called as each rollout finishes (for progress output). */
  onTrajectory?: (t: McpTrajectory, done: number, total: number) => void;
  /**
   * Called once a group's rollouts are all in, with the group's index in `scenarios` and each rollout's trace
   * span (src/util/tracing.ts): the callee
   * ends them (after adding the rewards, say). Without onGroup the spans end with their rollouts.
   */
  onGroup?: (group: McpTrajectory[], index: number, spans: TraceSpan[]) => void;
  signal?: AbortSignal;
}

/**
 * Runs K rollouts of every scenario, at most `concurrency` at a time, and returns them grouped by scenario in
 * the scenarios' order (result[i][k] is attempt k at scenarios[i]). A rollout whose own connection cannot be
 * opened comes back as a trajectory with `error`; a shared connection that cannot be opened throws
 * (McpConnectError), since then nothing can run.
 */
export async function rolloutGroups(opts: RolloutGroupsOptions): Promise<McpTrajectory[][]> {
  const connectOpts = {
    timeoutMs: opts.connectTimeoutMs,
    policy: opts.policyForSafety,
    callTimeoutMs: opts.callTimeoutMs,
    maxOutputChars: opts.maxOutputChars,
    sandboxFrom: opts.sandboxFrom,
    stateInMemory: opts.stateInMemory,
  };
  // A sandbox source with no {sandbox} to copy it into is a mistake of the whole run, not of each rollout.
  checkSandboxFrom(opts.target, opts.sandboxFrom);
  const shareOne = opts.target.kind === 'stdio' && !opts.isolate;
  let shared: { session: McpSession; tools: ToolInfo[] } | undefined;
  if (shareOne) {
    const session = await connect(opts.target, connectOpts);
    try {
      const tools = await session.listTools();
      checkScenarioTools(opts.scenarios, [...tools.map((t) => t.name), COMPLETE_TASK]);
      shared = { session, tools };
    } catch (err) {
      await session.close().catch(() => undefined);
      throw err;
    }
  } else {
    await checkTargetTools(opts.target, opts.scenarios, connectOpts);
  }

  const limit = pLimit(Math.max(1, opts.concurrency));
  const total = opts.scenarios.length * opts.rolloutsPerGroup;
  let done = 0;

  const one = async (scenario: Scenario, k: number, span: TraceSpan): Promise<McpTrajectory> => {
    const id = `${scenario.id}/${k}`;
    const base = {
      span,
      policy: opts.policy,
      scenario,
      systemPrompt: opts.systemPrompt,
      maxTurns: opts.maxTurns,
      callTimeoutMs: opts.callTimeoutMs,
      rolloutTimeoutMs: opts.rolloutTimeoutMs,
      seed: opts.seed !== undefined ? opts.seed + k : undefined,
      id,
      groupId: scenario.id,
      signal: opts.signal,
    };
    let t: McpTrajectory;
    if (shared) {
      t = await rollout({ ...base, session: shared.session, tools: shared.tools });
    } else {
      let session: McpSession | undefined;
      try {
        session = await connect(opts.target, { ...connectOpts, isolated: opts.isolate === true });
        const tools = await session.listTools();
        t = await rollout({ ...base, session, tools });
        if (opts.isolate && opts.target.kind === 'http') {
          t.logs.push('isolate: HTTP targets cannot be restarted per rollout; this rollout had its own connection only');
        }
      } catch (err) {
        t = failedTrajectory(base.id, scenario, opts.systemPrompt, err);
      } finally {
        await session?.close().catch(() => undefined);
      }
    }
    opts.onTrajectory?.(t, ++done, total);
    return t;
  };

  try {
    return await Promise.all(
      opts.scenarios.map(async (scenario, i) => {
        const spans: TraceSpan[] = [];
        const group = await Promise.all(Array.from({ length: opts.rolloutsPerGroup }, (_, k) => limit(() => {
          const span = (spans[k] = startSpan('mcprl.rollout', { 'mcprl.scenario_id': scenario.id, 'mcprl.rollout': k }));
          return withinSpan(span, () => one(scenario, k, span));
        })));
        if (opts.onGroup) opts.onGroup(group, i, spans);
        else for (const s of spans) s.end();
        return group;
      }),
    );
  } finally {
    await shared?.session.close().catch(() => undefined);
  }
}

/**
 * Refuses scenarios whose checks name a tool the target does not have (checkScenarioTools), before any rollout
 * runs. A target that cannot be reached is not refused here: each rollout meets that failure and records it.
 */
export async function checkTargetTools(target: Target, scenarios: Scenario[], connectOpts: ConnectOptions = {}): Promise<void> {
  if (!scenarios.some((s) => s.checks?.some((c) => c.kind === 'tool_called'))) return;
  let tools: ToolInfo[];
  try {
    const session = await connect(target, connectOpts);
    try {
      tools = await session.listTools();
    } finally {
      await session.close().catch(() => undefined);
    }
  } catch {
    return;
  }
  checkScenarioTools(scenarios, [...tools.map((t) => t.name), COMPLETE_TASK]);
}

/** A trajectory for a rollout that never started (its connection failed). */
function failedTrajectory(id: string, scenario: Scenario, systemPrompt: string | undefined, err: unknown): McpTrajectory {
  const message = err instanceof Error ? err.message : String(err);
  return {
    id,
    scenario_id: scenario.id,
    group_id: scenario.id,
    messages: [
      { role: 'system', content: systemPrompt ?? DEFAULT_SYSTEM_PROMPT },
      { role: 'user', content: scenario.task },
    ],
    tools: [],
    final_answer: null,
    reward: 0,
    reward_components: {},
    metrics: {
      turns: 0,
      tool_calls: 0,
      tool_errors: 0,
      invalid_calls: 0,
      unknown_outcomes: 0,
      completed: false,
      ran_out_of_turns: false,
      latency_ms: 0,
    },
    logs: [`could not start the rollout: ${message}`],
    error: message,
  };
}
