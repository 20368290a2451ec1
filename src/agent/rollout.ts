import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  toOpenAITools,
  type CallToolOptions,
  type ToolCallOutcome,
  type ToolExecution,
  type ToolInfo,
} from '../mcp/index.js';
import { isStateCheck, scenarioInSandbox, type Scenario } from '../scenarios/scenario.js';
import type { ChatMessage, OpenAITool, Policy, PolicyContext, PolicyTurn } from './policy.js';
import { EVAL_ROLLOUT_DEFAULTS } from './rollout-settings.js';
import { INVALID_CALL_PREFIX, NOT_EXECUTED_PREFIX, type McpTrajectory } from './trajectory.js';
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
  /** Seed of the policy's sampling (temperature and tokens per turn are the policy's own: see PolicyRequest). */
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

/** One rollout in progress: what it was given, and what it has built so far (the steps below extend it). */
interface RolloutRun {
  readonly opts: RolloutOptions;
  /** The server's tools by name (complete_task aside), and their argument validator. */
  readonly toolByName: Map<string, ToolInfo>;
  readonly validator: ArgsValidator;
  /** The tools as the model sees them: the server's and complete_task. */
  readonly modelTools: OpenAITool[];
  /** Aborts at the rollout's deadline or when the caller's signal does. */
  readonly signal: AbortSignal;
  readonly callTimeoutMs: number;
  readonly logs: string[];
  readonly log: (line: string) => void;
  readonly messages: ChatMessage[];
  readonly metrics: { turns: number; tool_calls: number; tool_errors: number; invalid_calls: number; unknown_outcomes: number };
  completed: boolean;
  /** complete_task's summary, once called. */
  summary: string | null;
  /** The last assistant text that was not blank: the final answer when complete_task never came. */
  lastText: string | null;
  /** Why the rollout ended early (the policy failed, the deadline passed, the caller aborted). */
  error?: string;
  completionTokens: number;
  /** The models that sampled the turns (rollout servers answer with their adapter's name). */
  readonly sampledBy: string[];
}

type ToolCall = PolicyTurn['toolCalls'][number];
type UnparsedCall = NonNullable<PolicyTurn['invalidToolCalls']>[number];

/**
 * Runs one agent attempt at a scenario: system prompt and task, then policy turns and tool calls until the
 * agent calls complete_task, answers without a tool call, runs out of turns, or times out. Nothing the model
 * outputs can make this throw; infrastructure failures (policy unreachable, timeout) end the rollout early
 * and are recorded in `error`.
 */
export async function rollout(opts: RolloutOptions): Promise<McpTrajectory> {
  // The task and checks as they read on this rollout's server: `{sandbox}` becomes its own sandbox directory.
  const scenario = scenarioInSandbox(opts.scenario, opts.session.sandboxDir);
  const started = performance.now();
  const maxTurns = opts.maxTurns ?? EVAL_ROLLOUT_DEFAULTS.maxTurns;
  const rolloutTimeoutMs = opts.rolloutTimeoutMs ?? 600_000;
  const deadline = new AbortController();
  const signal = opts.signal ? AbortSignal.any([opts.signal, deadline.signal]) : deadline.signal;
  const run = startRollout(opts, scenario.task, started, signal);
  const timer = setTimeout(() => deadline.abort(new McprlError('ROLLOUT_TIMEOUT', `rollout timed out after ${rolloutTimeoutMs} ms`)), rolloutTimeoutMs);

  try {
    while (run.metrics.turns < maxTurns && !run.completed && run.error === undefined) {
      // ── ask the policy for the next turn ──
      const turn = await askPolicy(run);
      if (!turn) break;
      const { assistant, calls, unparsed } = recordTurn(run, turn);
      // ── a turn without any tool call is the agent's final answer ──
      if (calls.length === 0 && unparsed.length === 0) {
        run.completed = (turn.content ?? '').trim() !== '';
        if (!run.completed) run.log('empty reply with no tool call; rollout ends unfinished');
        break;
      }
      // ── execute the calls in order, answering each one ──
      for (const call of calls) await runCall(run, call);
      if (unparsed.length > 0) answerUnparsed(run, unparsed);
      // ── results that would overflow the policy's context are cut to fit, so the next turn can still run ──
      if (opts.policy.context && !run.completed && run.metrics.turns < maxTurns) {
        const cut = fitToContext(opts.policy.context, run.messages, run.messages.indexOf(assistant) + 1, run.modelTools);
        if (cut > 0) run.log(`turn ${run.metrics.turns}: ${cut} tool result(s) cut to fit the model's context`);
      }
      if (signal.aborted) {
        run.error = errorText(signal.reason);
        run.log(run.error);
      }
    }
  } finally {
    clearTimeout(timer);
  }

  // ── state checks: what the scenario's read-only state tools show now, on this rollout's server ──
  const state = await readState(run, scenario);
  return finishRollout(run, state, maxTurns, started);
}

/** A rollout before its first turn: the system prompt and the task, and the tools the model will see. */
function startRollout(opts: RolloutOptions, task: string, started: number, signal: AbortSignal): RolloutRun {
  const logs: string[] = [];
  const log = (line: string) => logs.push(`[${Math.round(performance.now() - started)}ms] ${line}`);
  const serverTools = opts.tools.filter((t) => {
    if (t.name !== COMPLETE_TASK) return true;
    log(`server tool "${COMPLETE_TASK}" is hidden: the agent loop provides its own`);
    return false;
  });
  const validator = ArgsValidator.for(serverTools);
  for (const [name, why] of validator.uncompilable) log(`input schema of ${name} not validated locally: ${why}`);
  return {
    opts, validator, signal, logs, log,
    toolByName: new Map(serverTools.map((t) => [t.name, t])),
    modelTools: [...toOpenAITools(serverTools), COMPLETE_TASK_TOOL],
    callTimeoutMs: opts.callTimeoutMs ?? 60_000,
    messages: [
      { role: 'system', content: opts.systemPrompt ?? DEFAULT_SYSTEM_PROMPT },
      { role: 'user', content: task },
    ],
    metrics: { turns: 0, tool_calls: 0, tool_errors: 0, invalid_calls: 0, unknown_outcomes: 0 },
    completed: false, summary: null, lastText: null, completionTokens: 0, sampledBy: [],
  };
}

/** The policy's next turn, or undefined when the policy failed (the rollout's error then says why). */
async function askPolicy(run: RolloutRun): Promise<PolicyTurn | undefined> {
  const { opts, metrics, signal } = run;
  let turn: PolicyTurn;
  const modelSpan = startSpan('mcprl.model_call', { 'mcprl.scenario_id': opts.scenario.id, 'mcprl.turn': metrics.turns + 1, 'gen_ai.request.model': opts.policy.name }, opts.span);
  try {
    turn = await raceAbort(
      opts.policy.next({
        messages: run.messages.map((m) => ({ ...m })),
        tools: run.modelTools,
        seed: opts.seed,
        signal,
      }),
      signal,
    );
  } catch (err) {
    run.error = errorText(err);
    run.log(`policy failed: ${run.error}`);
    modelSpan.fail(run.error);
    modelSpan.end();
    return undefined;
  }
  metrics.turns++;
  modelSpan.set({
    'gen_ai.response.finish_reasons': turn.finishReason, 'gen_ai.usage.output_tokens': turn.tokenIds?.length,
    'mcprl.tool_calls': turn.toolCalls.length, 'mcprl.invalid_tool_calls': turn.invalidToolCalls?.length ?? 0,
  });
  modelSpan.end();
  if (turn.tokenIds) run.completionTokens += turn.tokenIds.length;
  if (turn.model !== undefined && !run.sampledBy.includes(turn.model)) run.sampledBy.push(turn.model);
  return turn;
}

/** Adds the turn to the conversation as an assistant message (with its sampled ids): its calls, and those unparsed. */
function recordTurn(run: RolloutRun, turn: PolicyTurn): { assistant: ChatMessage; calls: ToolCall[]; unparsed: UnparsedCall[] } {
  const calls = uniqueIds(turn.toolCalls, run.metrics.turns);
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
    if (turn.logprobs && !aligned) run.log(`turn ${run.metrics.turns}: logprobs not aligned with token ids; dropped`);
    assistant.mcprl = {
      token_ids: turn.tokenIds,
      logprobs: aligned ? turn.logprobs! : [],
      ...(aligned && turn.logprobTemperature !== undefined ? { temperature: turn.logprobTemperature } : {}),
      ...(turn.constrained ? { constrained: true } : {}),
    };
  }
  run.messages.push(assistant);
  if (turn.content && turn.content.trim() !== '') run.lastText = turn.content;
  const unparsed = turn.invalidToolCalls ?? [];
  run.log(
    `turn ${run.metrics.turns}: finish=${turn.finishReason} calls=[${calls.map((c) => c.name).join(', ')}]` +
      (unparsed.length ? ` unparseable=${unparsed.length}` : ''),
  );
  return { assistant, calls, unparsed };
}

/**
 * Answers one tool call: complete_task, a refusal of a call that cannot run (unknown tool, bad arguments, the
 * task already complete, the rollout cut short), or the server's result.
 */
async function runCall(run: RolloutRun, call: ToolCall): Promise<void> {
  const { metrics, signal } = run;
  metrics.tool_calls++;
  // Every answer says whether the server executed the call: only executed calls count for checks.
  const answer = (content: string, execution: ToolExecution) => {
    if (execution === 'unknown') metrics.unknown_outcomes++;
    run.messages.push({ role: 'tool', tool_call_id: call.id, name: call.name, content, execution });
  };
  const invalid = (why: string) => {
    metrics.invalid_calls++;
    run.log(`invalid call ${call.name}: ${why}`);
    answer(`${INVALID_CALL_PREFIX} ${why}`, 'not_executed');
  };
  if (run.completed) return answer(`${NOT_EXECUTED_PREFIX} complete_task was already called in this turn.`, 'not_executed');
  if (signal.aborted) return answer(`${NOT_EXECUTED_PREFIX} ${errorText(signal.reason)}.`, 'not_executed');
  const parsed = parseArgs(call.arguments);
  if (call.name === COMPLETE_TASK) {
    if (!parsed.ok) {
      invalid(`complete_task ${parsed.error}. Call it as complete_task({"summary": "..."}).`);
    } else if (typeof parsed.args.summary !== 'string') {
      invalid('complete_task needs a "summary" string: complete_task({"summary": "..."}).');
    } else {
      run.summary = parsed.args.summary;
      run.completed = true;
      answer('Task marked complete.', 'executed');
    }
    return;
  }
  if (!run.toolByName.has(call.name)) {
    return invalid(`Unknown tool "${call.name}". Available tools: ${[...run.toolByName.keys(), COMPLETE_TASK].join(', ')}.`);
  }
  if (!parsed.ok) return invalid(`The ${parsed.error} for ${call.name}; send a JSON object matching its parameters schema.`);
  const check = run.validator.check(call.name, parsed.args);
  if (!check.ok) return invalid(`Arguments for ${call.name} do not match its parameters schema: ${check.error}.`);
  await callServerTool(run, call, parsed.args, answer);
}

/** Sends a valid call to the server and answers with its result, or with why its outcome is not known. */
async function callServerTool(run: RolloutRun, call: ToolCall, args: Record<string, unknown>, answer: (content: string, execution: ToolExecution) => void): Promise<void> {
  const { opts, metrics, signal } = run;
  const toolSpan = startSpan('mcprl.tool_call', { 'mcprl.scenario_id': opts.scenario.id, 'mcprl.tool': call.name, 'mcprl.turn': metrics.turns }, opts.span);
  try {
    const outcome = await raceAbort(
      withinSpan(toolSpan, () => opts.session.callTool(call.name, args, { timeoutMs: run.callTimeoutMs, signal })),
      signal,
    );
    toolSpan.set({ 'mcprl.tool_error': outcome.isError });
    if (outcome.isError) {
      metrics.tool_errors++;
      run.log(`tool error from ${call.name}: ${outcome.text.slice(0, 200)}`);
    }
    // The model reads why; the operator, in the logs, reads how to let the tool run.
    if (outcome.refused) run.log(`the safety policy refused ${call.name}: ${outcome.refused.remedy}`);
    if (outcome.execution === 'unknown') run.log(`call ${call.name}: outcome unknown (the server may or may not have run it)`);
    answer(outcome.isError && !/^error\b/i.test(outcome.text) ? `Error: ${outcome.text}` : outcome.text, outcome.execution);
  } catch (err) {
    toolSpan.fail(errorText(signal.aborted ? signal.reason : err));
    if (signal.aborted) {
      // The call was in flight when the rollout was cut short: whether the server ran it is not known.
      answer(`Error: the rollout ended during the call (${errorText(signal.reason)}); whether the tool ran is not known.`, 'unknown');
      return;
    }
    // The session turns tool failures into outcomes; a throw means the server could not be reached (or
    // restarted) to send the call at all.
    metrics.tool_errors++;
    run.log(`call ${call.name} failed: ${errorText(err)}`);
    answer(`Error: the tool call failed: ${errorText(err)}`, 'not_executed');
  } finally {
    toolSpan.end();
  }
}

/** Tool calls that could not be parsed count as invalid calls; with no call id to answer, one user message says why. */
function answerUnparsed(run: RolloutRun, unparsed: UnparsedCall[]): void {
  run.metrics.tool_calls += unparsed.length;
  run.metrics.invalid_calls += unparsed.length;
  for (const u of unparsed) run.log(`unparseable tool call: ${u.error}: ${u.raw.slice(0, 200)}`);
  run.messages.push({
    role: 'user',
    content: unparsed
      .map((u) => `Error: a tool call could not be parsed (${u.error}): ${u.raw.slice(0, 500)}`)
      .join('\n'),
  });
}

/** What the scenario's state checks' read-only tools show at the end of the rollout, on its own server. */
async function readState(run: RolloutRun, scenario: Scenario): Promise<NonNullable<McpTrajectory['state']>> {
  const state: NonNullable<McpTrajectory['state']> = [];
  for (const c of (scenario.checks ?? []).filter(isStateCheck)) {
    try {
      const out = await run.opts.session.callTool(c.tool, c.args, { timeoutMs: run.callTimeoutMs });
      state.push({ tool: c.tool, args: c.args, text: out.text, is_error: out.isError });
    } catch (err) {
      state.push({ tool: c.tool, args: c.args, text: errorText(err), is_error: true });
    }
  }
  return state;
}

/** The rollout's trajectory (reward 0 until it is scored), its figures also set on the rollout's span. */
function finishRollout(run: RolloutRun, state: NonNullable<McpTrajectory['state']>, maxTurns: number, started: number): McpTrajectory {
  const { opts, metrics, completed, error } = run;
  const ranOut = !completed && error === undefined && metrics.turns >= maxTurns;
  if (ranOut) run.log(`ran out of turns (${maxTurns})`);
  const trajectory: McpTrajectory = {
    id: opts.id ?? `${opts.scenario.id}-${randomUUID().slice(0, 8)}`,
    scenario_id: opts.scenario.id,
    ...(opts.groupId !== undefined ? { group_id: opts.groupId } : {}),
    messages: run.messages,
    tools: run.modelTools,
    final_answer: run.summary ?? run.lastText,
    reward: 0,
    reward_components: {},
    metrics: {
      ...metrics,
      completed,
      ran_out_of_turns: ranOut,
      latency_ms: Math.round(performance.now() - started),
    },
    logs: run.logs,
  };
  if (state.length) trajectory.state = state;
  if (run.sampledBy.length) trajectory.sampled_by = run.sampledBy;
  if (opts.session.sandboxDir !== undefined) trajectory.sandbox = opts.session.sandboxDir;
  if (error !== undefined) trajectory.error = error;
  opts.span?.set({
    'mcprl.rollout_id': trajectory.id, 'mcprl.turns': metrics.turns, 'mcprl.tool_calls': metrics.tool_calls, 'mcprl.invalid_calls': metrics.invalid_calls,
    'mcprl.tool_errors': metrics.tool_errors, 'mcprl.completed': completed, 'gen_ai.usage.output_tokens': run.completionTokens, 'mcprl.error': error,
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
export function fitToContext(ctx: PolicyContext, messages: ChatMessage[], from: number, tools: OpenAITool[]): number {
  // Each result is always cut from its original text, so a second pass does not nest markers.
  const results = messages.slice(from).filter((m) => m.role === 'tool' && (m.content ?? '') !== '')
    .map((m) => ({ m, text: m.content!, n: ctx.count(m.content!), kept: -1 }))
    .sort((a, b) => b.n - a.n);
  for (let pass = 0; pass < 4; pass++) {
    let over = -ctx.room(messages, tools);
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
