/**
 * A scripted OpenAI-compatible *policy* for tests. It stands in for a remote model (which cannot run here):
 * every request is answered by a strategy that reads the conversation so far and decides the next assistant
 * turn. Strategies are stateless functions of the request, so any number of rollouts can run against one
 * double concurrently. Built on the generic HTTP double in ./openai-double.ts.
 *
 * Strategies:
 * - goodStrategy(scenarios): an oracle that performs exactly the scenario's checked tool calls, then calls
 *   complete_task with a summary quoting every tool result (so answer_contains checks are met honestly).
 * - badStrategy(): looks around with an irrelevant call, then gives up with a useless summary.
 * - scriptedStrategy(turns): plays the given assistant turns in order (one per assistant turn already in the
 *   conversation), then calls complete_task. Used for malformed output of every kind.
 */
import { startOpenAIDouble, type OpenAIDouble, type RecordedRequest, type Reply } from './openai-double.js';

export interface ScenarioLike {
  id: string;
  task: string;
  /**
   * Only the checked calls are acted on (tool_called checks, and the calls an answer_value check read its value
   * from); the others (answers, state checks) are left to the scorer.
   */
  checks?: readonly { kind: string; tool?: string; args?: Record<string, unknown>; via?: readonly { tool: string; args: Record<string, unknown> }[] }[];
}

/** One assistant turn to play. `arguments` may be a string to send deliberately broken JSON. */
export interface ScriptedTurn {
  content?: string | null;
  toolCalls?: { name?: string; arguments: Record<string, unknown> | string; id?: string }[];
  finishReason?: string;
  /** Sent as the `mcprl_token_ids` extension field on the choice. */
  tokenIds?: number[];
  /** Sent as standard `logprobs.content` entries. */
  logprobs?: number[];
  /** Send this HTTP error instead of a completion. */
  httpStatus?: number;
}

export type Strategy = (body: any, req: RecordedRequest) => ScriptedTurn;

let counter = 0;

/** Encodes a ScriptedTurn as a chat.completion (or an error) in OpenAI's wire format. */
export function turnReply(turn: ScriptedTurn): Reply {
  if (turn.httpStatus !== undefined) {
    return { kind: 'json', status: turn.httpStatus, json: { error: { message: `policy-double HTTP ${turn.httpStatus}`, type: 'server_error', param: null, code: null } } };
  }
  const calls = (turn.toolCalls ?? []).map((c, i) => ({
    id: c.id ?? `call_${++counter}_${i}`,
    type: 'function',
    function: {
      ...(c.name !== undefined ? { name: c.name } : {}),
      arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments),
    },
  }));
  const choice: Record<string, unknown> = {
    index: 0,
    message: { role: 'assistant', content: turn.content ?? null, ...(calls.length ? { tool_calls: calls } : {}) },
    finish_reason: turn.finishReason ?? (calls.length ? 'tool_calls' : 'stop'),
    logprobs: turn.logprobs
      ? { content: turn.logprobs.map((lp, i) => ({ token: `t${i}`, logprob: lp, bytes: null, top_logprobs: [] })) }
      : null,
  };
  if (turn.tokenIds) choice.mcprl_token_ids = turn.tokenIds;
  return {
    kind: 'json',
    status: 200,
    json: {
      id: `chatcmpl-policy-${++counter}`,
      object: 'chat.completion',
      created: 1_700_000_000,
      model: 'policy-double',
      choices: [choice],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    },
  };
}

/** Starts an HTTP double whose every chat request is answered by `strategy`. */
export async function startPolicyDouble(strategy: Strategy): Promise<OpenAIDouble> {
  return startOpenAIDouble([], {
    fallback: (req) => turnReply(strategy(req.body, req)),
  });
}

/** Number of assistant turns already in the conversation = index of the turn to play now. */
export function assistantTurns(body: any): number {
  return (body?.messages ?? []).filter((m: any) => m.role === 'assistant').length;
}

/** The task: the first user message. */
export function taskOf(body: any): string {
  return (body?.messages ?? []).find((m: any) => m.role === 'user')?.content ?? '';
}

/** Contents of the tool messages so far. */
export function toolResults(body: any): string[] {
  return (body?.messages ?? []).filter((m: any) => m.role === 'tool').map((m: any) => String(m.content ?? ''));
}

/**
 * The oracle. With `parallel` it issues all checked calls in one turn, otherwise one per turn; either way it
 * then completes with a summary that quotes every tool result.
 */
export function goodStrategy(scenarios: ScenarioLike[], opts: { parallel?: boolean } = {}): Strategy {
  const byTask = new Map(scenarios.map((s) => [s.task, s]));
  return (body) => {
    const found = findScenario(scenarios, byTask, taskOf(body));
    if (!found) return { content: 'policy-double: unknown task' };
    const { scenario, sandbox } = found;
    const checked = (scenario.checks ?? []).flatMap((c) => (c.kind === 'tool_called' && c.tool ? [{ tool: c.tool, args: c.args ?? {} }] : c.kind === 'answer_value' ? (c.via ?? []) : []));
    // An answer_value check per value repeats its calls: each is made once.
    const unique = [...new Map(checked.map((c) => [JSON.stringify(c), c])).values()];
    const calls = unique.map((c) => ({ name: c.tool, arguments: sandbox === undefined ? c.args : (JSON.parse(JSON.stringify(c.args).split(SANDBOX).join(sandbox)) as Record<string, unknown>) }));
    const step = assistantTurns(body);
    if (opts.parallel) {
      if (step === 0 && calls.length > 0) return { toolCalls: calls };
    } else if (step < calls.length) {
      return { toolCalls: [calls[step]] };
    }
    return { toolCalls: [{ name: 'complete_task', arguments: { summary: `Done. Findings: ${toolResults(body).join(' | ')}` } }] };
  };
}

const SANDBOX = '{sandbox}';

/**
 * The scenario whose task this is. A task stored with `{sandbox}` reads with the rollout's sandbox directory in its
 * place, which is returned too, so that the oracle's calls use it.
 */
function findScenario(scenarios: ScenarioLike[], byTask: Map<string, ScenarioLike>, task: string): { scenario: ScenarioLike; sandbox?: string } | undefined {
  const exact = byTask.get(task);
  if (exact) return { scenario: exact };
  for (const scenario of scenarios) {
    if (!scenario.task.includes(SANDBOX)) continue;
    const pattern = scenario.task.split(SANDBOX).map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('(.+?)');
    const m = new RegExp(`^${pattern}$`, 's').exec(task);
    if (m && m.slice(1).every((d) => d === m[1])) return { scenario, sandbox: m[1] };
  }
  return undefined;
}

/** A policy that does not try: one irrelevant lookup, then gives up. */
export function badStrategy(): Strategy {
  return (body) => {
    if (assistantTurns(body) === 0) return { toolCalls: [{ name: 'list_authors', arguments: {} }] };
    return { toolCalls: [{ name: 'complete_task', arguments: { summary: 'Sorry, I could not work this out.' } }] };
  };
}

/** Plays `turns` in order, then completes with `finalSummary`. */
export function scriptedStrategy(turns: ScriptedTurn[], finalSummary = 'done'): Strategy {
  return (body) => {
    const step = assistantTurns(body);
    if (step < turns.length) return turns[step];
    return { toolCalls: [{ name: 'complete_task', arguments: { summary: finalSummary } }] };
  };
}
