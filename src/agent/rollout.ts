import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pLimit from 'p-limit';
import {
  checkSandboxFrom,
  connect,
  toOpenAITools,
  type CallToolOptions,
  type ConnectOptions,
  type McpSession,
  type SafetyPolicy,
  type Target,
  type ToolCallOutcome,
  type ToolExecution,
  type ToolInfo,
} from '../mcp/index.js';
import { checkScenarioTools, isStateCheck, scenarioInSandbox, type Scenario } from '../scenarios/scenario.js';
import type { ChatMessage, OpenAITool, Policy, PolicyContext, PolicyTurn } from './policy.js';
import { EVAL_ROLLOUT_DEFAULTS } from './rollout-settings.js';
import { INVALID_CALL_PREFIX, NOT_EXECUTED_PREFIX, type Trajectory } from './trajectory.js';
import { ArgsValidator } from './validate-args.js';
import { McprlError } from '../util/errors.js';
import { startSpan, withinSpan, type TraceSpan } from '../util/tracing.js';

/** The tool the agent loop itself provides (as in ART): calling it ends the rollout with a final answer. */
export const COMPLETE_TASK = 'complete_task';

export const COMPLETE_TASK_TOOL: OpenAITool = {
  type: 'function',
  function: {
    name: COMPLETE_TASK,
    description:
      'Call this once the task is done (or cannot be done). The summary is your final answer to the user: ' +
      'state the concrete facts and values you found or the actions you took.',
    parameters: {
      type: 'object',
      properties: { summary: { type: 'string', description: 'Your final answer to the task.' } },
      required: ['summary'],
    },
  },
};

export const DEFAULT_SYSTEM_PROMPT =
  'You are an agent that completes tasks by calling the tools of an MCP server. Use the tools to look up the ' +
  'information you need and to take the actions the task asks for; never guess a fact you could look up. ' +
  'Call tools with arguments that match their parameter schemas. When the task is done, call complete_task ' +
  'with a summary that answers the task and states the concrete values you found. If the task cannot be ' +
  'done, call complete_task and explain why.';

/** The part of an MCP session the loop needs; `McpSession` from src/mcp satisfies it. */
export interface ToolCaller {
  /** The server's `{sandbox}` directory, when it has one (scenarios' `{sandbox}` placeholders stand for it). */
  readonly sandboxDir?: string;
  callTool(name: string, args: Record<string, unknown>, opts?: CallToolOptions): Promise<ToolCallOutcome>;
}

export interface RolloutOptions {
  policy: Policy;
  session: ToolCaller;
  /** The server's tools (from listTools). complete_task is added by the loop. */
  tools: ToolInfo[];
  scenario: Scenario;
  /** Default DEFAULT_SYSTEM_PROMPT. */
  systemPrompt?: string;
  /** Assistant turns before the rollout is cut off. Default 10 (EVAL_ROLLOUT_DEFAULTS). */
  maxTurns?: number;
  /** Timeout of one tool call in milliseconds. Default 60000. */
  callTimeoutMs?: number;
  /** Timeout of the whole rollout in milliseconds. Default 600000. */
  rolloutTimeoutMs?: number;
  temperature?: number;
  /** Cap on tokens per assistant turn. Default: the policy's. */
  maxTokens?: number;
  seed?: number;
  /** Trajectory id. Default `<scenario id>-<random>`. */
  id?: string;
  groupId?: string;
  signal?: AbortSignal;
  /**
   * The rollout's trace span (src/util/tracing.ts), which the caller ends: the model and tool calls are its
   * children, and it gets the rollout's figures as attributes. Default: none.
   */
  span?: TraceSpan;
}

/** Rejects with the signal's reason as soon as it aborts, whether or not `p` honours the signal itself. */
function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

type ParsedArgs = { ok: true; args: Record<string, unknown> } | { ok: false; error: string };

function parseArgs(raw: string): ParsedArgs {
  // Some models send "" for a tool without parameters; that is not worth punishing.
  if (raw.trim() === '') return { ok: true, args: {} };
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    return { ok: false, error: `arguments are not valid JSON (${(err as Error).message})` };
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { ok: false, error: 'arguments must be a JSON object' };
  }
  return { ok: true, args: value as Record<string, unknown> };
}

/**
 * Runs one agent attempt at a scenario: system prompt and task, then policy turns and tool calls until the
 * agent calls complete_task, answers without a tool call, runs out of turns, or times out. Nothing the model
 * outputs can make this throw; infrastructure failures (policy unreachable, timeout) end the rollout early
 * and are recorded in `error`.
 */
export async function rollout(opts: RolloutOptions): Promise<Trajectory> {
  // The task and checks as they read on this rollout's server: `{sandbox}` becomes its own sandbox directory.
  const scenario = scenarioInSandbox(opts.scenario, opts.session.sandboxDir);
  const started = performance.now();
  const logs: string[] = [];
  const log = (line: string) => logs.push(`[${Math.round(performance.now() - started)}ms] ${line}`);
  const maxTurns = opts.maxTurns ?? EVAL_ROLLOUT_DEFAULTS.maxTurns;
  const rolloutTimeoutMs = opts.rolloutTimeoutMs ?? 600_000;
  const callTimeoutMs = opts.callTimeoutMs ?? 60_000;

  const serverTools = opts.tools.filter((t) => {
    if (t.name !== COMPLETE_TASK) return true;
    log(`server tool "${COMPLETE_TASK}" is hidden: the agent loop provides its own`);
    return false;
  });
  const toolByName = new Map(serverTools.map((t) => [t.name, t]));
  const modelTools = [...toOpenAITools(serverTools), COMPLETE_TASK_TOOL];
  const validator = ArgsValidator.for(serverTools);
  for (const [name, why] of validator.uncompilable) log(`input schema of ${name} not validated locally: ${why}`);

  const messages: ChatMessage[] = [
    { role: 'system', content: opts.systemPrompt ?? DEFAULT_SYSTEM_PROMPT },
    { role: 'user', content: scenario.task },
  ];
  const metrics = { turns: 0, tool_calls: 0, tool_errors: 0, invalid_calls: 0, unknown_outcomes: 0 };
  let completed = false;
  let summary: string | null = null;
  let lastText: string | null = null;
  let error: string | undefined;
  let completionTokens = 0;
  const sampledBy: string[] = [];

  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(new McprlError('ROLLOUT_TIMEOUT', `rollout timed out after ${rolloutTimeoutMs} ms`)), rolloutTimeoutMs);
  const signal = opts.signal ? AbortSignal.any([opts.signal, deadline.signal]) : deadline.signal;

  try {
    while (metrics.turns < maxTurns && !completed && error === undefined) {
      // ── ask the policy for the next turn ──
      let turn: PolicyTurn;
      const modelSpan = startSpan('mcprl.model_call', { 'mcprl.scenario_id': opts.scenario.id, 'mcprl.turn': metrics.turns + 1, 'gen_ai.request.model': opts.policy.name }, opts.span);
      try {
        turn = await raceAbort(
          opts.policy.next({
            messages: messages.map((m) => ({ ...m })),
            tools: modelTools,
            temperature: opts.temperature,
            maxTokens: opts.maxTokens,
            seed: opts.seed,
            signal,
          }),
          signal,
        );
      } catch (err) {
        error = errorText(err);
        log(`policy failed: ${error}`);
        modelSpan.fail(error);
        modelSpan.end();
        break;
      }
      metrics.turns++;
      modelSpan.set({
        'gen_ai.response.finish_reasons': turn.finishReason, 'gen_ai.usage.output_tokens': turn.tokenIds?.length,
        'mcprl.tool_calls': turn.toolCalls.length, 'mcprl.invalid_tool_calls': turn.invalidToolCalls?.length ?? 0,
      });
      modelSpan.end();
      if (turn.tokenIds) completionTokens += turn.tokenIds.length;
      if (turn.model !== undefined && !sampledBy.includes(turn.model)) sampledBy.push(turn.model);

      const calls = uniqueIds(turn.toolCalls, metrics.turns);
      const assistant: ChatMessage = { role: 'assistant', content: turn.content ?? null };
      if (calls.length > 0) {
        assistant.tool_calls = calls.map((c) => ({
          id: c.id,
          type: 'function',
          function: { name: c.name, arguments: c.arguments },
        }));
      }
      if (turn.tokenIds) {
        const aligned = turn.logprobs && turn.logprobs.length === turn.tokenIds.length;
        if (turn.logprobs && !aligned) log(`turn ${metrics.turns}: logprobs not aligned with token ids; dropped`);
        assistant.mcprl = {
          token_ids: turn.tokenIds,
          logprobs: aligned ? turn.logprobs! : [],
          ...(aligned && turn.logprobTemperature !== undefined ? { temperature: turn.logprobTemperature } : {}),
          ...(turn.constrained ? { constrained: true } : {}),
        };
      }
      messages.push(assistant);
      if (turn.content && turn.content.trim() !== '') lastText = turn.content;
      const unparsed = turn.invalidToolCalls ?? [];
      log(
        `turn ${metrics.turns}: finish=${turn.finishReason} calls=[${calls.map((c) => c.name).join(', ')}]` +
          (unparsed.length ? ` unparseable=${unparsed.length}` : ''),
      );

      // ── a turn without any tool call is the agent's final answer ──
      if (calls.length === 0 && unparsed.length === 0) {
        completed = (turn.content ?? '').trim() !== '';
        if (!completed) log('empty reply with no tool call; rollout ends unfinished');
        break;
      }

      // ── execute the calls in order, answering each one ──
      for (const call of calls) {
        metrics.tool_calls++;
        // Every answer says whether the server executed the call: only executed calls count for checks.
        const answer = (content: string, execution: ToolExecution) => {
          if (execution === 'unknown') metrics.unknown_outcomes++;
          messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content, execution });
        };
        const invalid = (why: string) => {
          metrics.invalid_calls++;
          log(`invalid call ${call.name}: ${why}`);
          answer(`${INVALID_CALL_PREFIX} ${why}`, 'not_executed');
        };
        if (completed) {
          answer(`${NOT_EXECUTED_PREFIX} complete_task was already called in this turn.`, 'not_executed');
          continue;
        }
        if (signal.aborted) {
          answer(`${NOT_EXECUTED_PREFIX} ${errorText(signal.reason)}.`, 'not_executed');
          continue;
        }
        const parsed = parseArgs(call.arguments);
        if (call.name === COMPLETE_TASK) {
          if (!parsed.ok) {
            invalid(`complete_task ${parsed.error}. Call it as complete_task({"summary": "..."}).`);
          } else if (typeof parsed.args.summary !== 'string') {
            invalid('complete_task needs a "summary" string: complete_task({"summary": "..."}).');
          } else {
            summary = parsed.args.summary;
            completed = true;
            answer('Task marked complete.', 'executed');
          }
          continue;
        }
        if (!toolByName.has(call.name)) {
          invalid(`Unknown tool "${call.name}". Available tools: ${[...toolByName.keys(), COMPLETE_TASK].join(', ')}.`);
          continue;
        }
        if (!parsed.ok) {
          invalid(`The ${parsed.error} for ${call.name}; send a JSON object matching its parameters schema.`);
          continue;
        }
        const check = validator.check(call.name, parsed.args);
        if (!check.ok) {
          invalid(`Arguments for ${call.name} do not match its parameters schema: ${check.error}.`);
          continue;
        }
        const toolSpan = startSpan('mcprl.tool_call', { 'mcprl.scenario_id': opts.scenario.id, 'mcprl.tool': call.name, 'mcprl.turn': metrics.turns }, opts.span);
        try {
          const outcome = await raceAbort(
            withinSpan(toolSpan, () => opts.session.callTool(call.name, parsed.args, { timeoutMs: callTimeoutMs, signal })),
            signal,
          );
          toolSpan.set({ 'mcprl.tool_error': outcome.isError });
          if (outcome.isError) {
            metrics.tool_errors++;
            log(`tool error from ${call.name}: ${outcome.text.slice(0, 200)}`);
          }
          // The model reads why; the operator, in the logs, reads how to let the tool run.
          if (outcome.refused) log(`the safety policy refused ${call.name}: ${outcome.refused.remedy}`);
          if (outcome.execution === 'unknown') log(`call ${call.name}: outcome unknown (the server may or may not have run it)`);
          answer(outcome.isError && !/^error\b/i.test(outcome.text) ? `Error: ${outcome.text}` : outcome.text, outcome.execution);
        } catch (err) {
          toolSpan.fail(errorText(signal.aborted ? signal.reason : err));
          if (signal.aborted) {
            // The call was in flight when the rollout was cut short: whether the server ran it is not known.
            answer(`Error: the rollout ended during the call (${errorText(signal.reason)}); whether the tool ran is not known.`, 'unknown');
            continue;
          }
          // The session turns tool failures into outcomes; a throw means the server could not be reached (or
          // restarted) to send the call at all.
          metrics.tool_errors++;
          log(`call ${call.name} failed: ${errorText(err)}`);
          answer(`Error: the tool call failed: ${errorText(err)}`, 'not_executed');
        } finally {
          toolSpan.end();
        }
      }
      if (unparsed.length > 0) {
        metrics.tool_calls += unparsed.length;
        metrics.invalid_calls += unparsed.length;
        for (const u of unparsed) log(`unparseable tool call: ${u.error}: ${u.raw.slice(0, 200)}`);
        // There is no call id to answer, so the errors go back as one user message.
        messages.push({
          role: 'user',
          content: unparsed
            .map((u) => `Error: a tool call could not be parsed (${u.error}): ${u.raw.slice(0, 500)}`)
            .join('\n'),
        });
      }
      // ── results that would overflow the policy's context are cut to fit, so the next turn can still run ──
      if (opts.policy.context && !completed && metrics.turns < maxTurns) {
        const cut = fitToContext(opts.policy.context, messages, messages.indexOf(assistant) + 1, modelTools, opts.maxTokens);
        if (cut > 0) log(`turn ${metrics.turns}: ${cut} tool result(s) cut to fit the model's context`);
      }
      if (signal.aborted) {
        error = errorText(signal.reason);
        log(error);
      }
    }
  } finally {
    clearTimeout(timer);
  }

  // ── state checks: what the scenario's read-only state tools show now, on this rollout's server ──
  const stateChecks = (scenario.checks ?? []).filter(isStateCheck);
  const state: NonNullable<Trajectory['state']> = [];
  for (const c of stateChecks) {
    try {
      const out = await opts.session.callTool(c.tool, c.args, { timeoutMs: callTimeoutMs });
      state.push({ tool: c.tool, args: c.args, text: out.text, is_error: out.isError });
    } catch (err) {
      state.push({ tool: c.tool, args: c.args, text: errorText(err), is_error: true });
    }
  }

  const ranOut = !completed && error === undefined && metrics.turns >= maxTurns;
  if (ranOut) log(`ran out of turns (${maxTurns})`);
  const trajectory: Trajectory = {
    id: opts.id ?? `${opts.scenario.id}-${randomUUID().slice(0, 8)}`,
    scenario_id: opts.scenario.id,
    ...(opts.groupId !== undefined ? { group_id: opts.groupId } : {}),
    messages,
    tools: modelTools,
    final_answer: summary ?? lastText,
    reward: 0,
    reward_components: {},
    metrics: {
      ...metrics,
      completed,
      ran_out_of_turns: ranOut,
      latency_ms: Math.round(performance.now() - started),
    },
    logs,
  };
  if (state.length) trajectory.state = state;
  if (sampledBy.length) trajectory.sampled_by = sampledBy;
  if (opts.session.sandboxDir !== undefined) trajectory.sandbox = opts.session.sandboxDir;
  if (error !== undefined) trajectory.error = error;
  opts.span?.set({
    'mcprl.rollout_id': trajectory.id, 'mcprl.turns': metrics.turns, 'mcprl.tool_calls': metrics.tool_calls, 'mcprl.invalid_calls': metrics.invalid_calls,
    'mcprl.tool_errors': metrics.tool_errors, 'mcprl.completed': completed, 'gen_ai.usage.output_tokens': completionTokens, 'mcprl.error': error,
  });
  return trajectory;
}

/** Tool call ids must be unique within a conversation for the answers to be unambiguous. */
function uniqueIds(calls: PolicyTurn['toolCalls'], turn: number): PolicyTurn['toolCalls'] {
  const seen = new Set<string>();
  return calls.map((c, i) => {
    let id = c.id || `call_${turn}_${i}`;
    if (seen.has(id)) id = `${id}_${turn}_${i}`;
    seen.add(id);
    return { ...c, id };
  });
}

/** Tokens kept free for the truncation marker (it is short; its exact length is measured when it is added). */
const MARKER_TOKENS = 40;

/**
 * Cuts the tool results of the turn that starts at `from` — the longest first — until the next turn fits the
 * policy's context, each with a visible marker saying how much was kept, measured in tokens. Returns how many
 * results were cut. Earlier turns are left alone: the model has already read them as they are.
 */
export function fitToContext(ctx: PolicyContext, messages: ChatMessage[], from: number, tools: OpenAITool[], maxTokens: number | undefined): number {
  // Each result is always cut from its original text, so a second pass does not nest markers.
  const results = messages.slice(from).filter((m) => m.role === 'tool' && (m.content ?? '') !== '')
    .map((m) => ({ m, text: m.content!, n: ctx.count(m.content!), kept: -1 }))
    .sort((a, b) => b.n - a.n);
  for (let pass = 0; pass < 4; pass++) {
    let over = -ctx.room(messages, tools, maxTokens);
    if (over <= 0) break;
    for (const r of results) {
      if (over <= 0) break;
      const had = r.kept < 0 ? r.n : r.kept;
      if (had === 0) continue;
      r.kept = Math.max(0, had - over - (r.kept < 0 ? MARKER_TOKENS : 0));
      r.m.content = `${ctx.prefix(r.text, r.kept)}\n…[tool output cut by mcprl to fit the model's context: showing ${r.kept} of ${r.n} tokens]`;
      over -= had - r.kept;
    }
  }
  return results.filter((r) => r.kept >= 0).length;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export interface RolloutGroupsOptions {
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
  systemPrompt?: string;
  /** Default 10 (EVAL_ROLLOUT_DEFAULTS). */
  maxTurns?: number;
  callTimeoutMs?: number;
  rolloutTimeoutMs?: number;
  temperature?: number;
  maxTokens?: number;
  /** Base seed; rollout k of a group gets seed + k so that the attempts differ. */
  seed?: number;
  /** Connect/initialize timeout in milliseconds. Default 30000. */
  connectTimeoutMs?: number;
  /** Output cap of one tool result in characters. Default: src/mcp's. */
  maxOutputChars?: number;
  /** Called as each rollout finishes (for progress output). */
  onTrajectory?: (t: Trajectory, done: number, total: number) => void;
  /**
   * Called once a group's rollouts are all in, with the group's index in `scenarios` and each rollout's trace
   * span (src/util/tracing.ts): the callee
   * ends them (after adding the rewards, say). Without onGroup the spans end with their rollouts.
   */
  onGroup?: (group: Trajectory[], index: number, spans: TraceSpan[]) => void;
  signal?: AbortSignal;
}

/**
 * Runs K rollouts of every scenario, at most `concurrency` at a time, and returns them grouped by scenario in
 * the scenarios' order (result[i][k] is attempt k at scenarios[i]). A rollout whose own connection cannot be
 * opened comes back as a trajectory with `error`; a shared connection that cannot be opened throws
 * (McpConnectError), since then nothing can run.
 */
export async function rolloutGroups(opts: RolloutGroupsOptions): Promise<Trajectory[][]> {
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

  const one = async (scenario: Scenario, k: number, span: TraceSpan): Promise<Trajectory> => {
    const id = `${scenario.id}/${k}`;
    const base = {
      span,
      policy: opts.policy,
      scenario,
      systemPrompt: opts.systemPrompt,
      maxTurns: opts.maxTurns,
      callTimeoutMs: opts.callTimeoutMs,
      rolloutTimeoutMs: opts.rolloutTimeoutMs,
      temperature: opts.temperature,
      maxTokens: opts.maxTokens,
      seed: opts.seed !== undefined ? opts.seed + k : undefined,
      id,
      groupId: scenario.id,
      signal: opts.signal,
    };
    let t: Trajectory;
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
function failedTrajectory(id: string, scenario: Scenario, systemPrompt: string | undefined, err: unknown): Trajectory {
  const message = errorText(err);
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
