import OpenAI from 'openai';
import { APIError } from 'openai';
import type { OpenAITool } from '../mcp/index.js';
import type { ChatMessage } from '../chat/message.js';
import { parseToolCalls, TOOL_CALL_OPEN } from '../chat/parse-tool-call.js';
import { McprlError } from '../util/errors.js';

export type { OpenAITool, ChatMessage };

/**
 * One turn's request. How the policy samples (temperature, tokens per turn) is not asked per turn: it is fixed when
 * the policy is made (EnginePolicyOptions, OpenAIPolicyOptions), so a rollout's sampling is set in one place.
 */
export interface PolicyRequest {
  messages: ChatMessage[];
  tools: OpenAITool[];
  seed?: number;
  signal?: AbortSignal;
}

/** What the policy produced for one assistant turn. */
export interface PolicyTurn {
  content: string | null;
  toolCalls: { id: string; name: string; arguments: string }[];
  finishReason: string;
  /** Exact sampled token ids of this turn, when the policy knows them. */
  tokenIds?: number[];
  /** One logprob per sampled token, aligned with tokenIds when both are present. */
  logprobs?: number[];
  /** Set when `logprobs` are the sampler's, at this temperature (see ChatMessage.mcprl.temperature). */
  logprobTemperature?: number;
  /** The turn was decoded with tool calls constrained to the tools' schemas. */
  constrained?: boolean;
  /** Tool calls the policy saw but could not parse (e.g. malformed Hermes `<tool_call>` blocks). */
  invalidToolCalls?: { raw: string; error: string }[];
  /**
   * The model that answered, as the endpoint named it (a chat completion's `model`; on a server in vLLM's dialect
   * the adapter's name), when the policy knows it.
   */
  model?: string;
}

/**
 * A policy's context window, in its own tokens: what the rollout loop needs to fit tool results into it, so that
 * a huge result degrades one turn instead of failing the rollout.
 */
export interface PolicyContext {
  /** Tokens left free when the next turn is asked for with these messages and tools, after reserving the policy's turn length for the reply (negative: over). */
  room(messages: ChatMessage[], tools: OpenAITool[]): number;
  /** Tokens `text` takes. */
  count(text: string): number;
  /** The longest prefix of `text` of at most `tokens` tokens. */
  prefix(text: string, tokens: number): string;
}

/** Anything that can take the next assistant turn: a remote endpoint or the in-process engine. */
export interface Policy {
  readonly name: string;
  next(req: PolicyRequest): Promise<PolicyTurn>;
  /** Present when the policy knows its tokenizer and context length (the local engine). */
  readonly context?: PolicyContext;
}

export type PolicyErrorCode = 'POLICY_HTTP' | 'POLICY_UNREACHABLE' | 'POLICY_BAD_RESPONSE' | 'POLICY_ABORTED';

/** An infrastructure failure talking to the policy (not something the model did). */
export class PolicyError extends McprlError<PolicyErrorCode> {
  readonly status?: number;
  constructor(code: PolicyErrorCode, message: string, opts: { status?: number; cause?: unknown } = {}) {
    super(code, message, { cause: opts.cause });
    this.status = opts.status;
  }
}

export interface OpenAIPolicyOptions {
  /** Base URL of the OpenAI-compatible API, e.g. `http://localhost:8000/v1`. */
  baseURL: string;
  model: string;
  /** Sampling temperature of every turn. Default: the endpoint's. */
  temperature?: number;
  /** Cap on generated tokens per turn. Default: the endpoint's. */
  maxTokens?: number;
  /** API key. Default: a placeholder, which local servers accept. */
  apiKey?: string;
  /** Ask the endpoint for per-token logprobs. Default false (some hosted endpoints refuse it with tools). */
  logprobs?: boolean;
  /** Retries the SDK makes on 429/5xx/connection errors. Default 2. */
  maxRetries?: number;
  /** Request timeout in milliseconds. Default 120000. */
  timeoutMs?: number;
  /**
   * Ask for the exact sampled token ids in vLLM's fields (`return_token_ids`, and `return_tokens_as_token_ids`
   * so that logprob entries name their ids on servers without the former); implies `logprobs`. Default false.
   */
  tokenIds?: boolean;
  /** Extra body fields passed through to the endpoint (e.g. `{ top_k: 20 }` for vLLM). */
  extraBody?: Record<string, unknown>;
}

/**
 * A policy behind any OpenAI-compatible chat-completions endpoint (hosted, vLLM, or `mcprl serve`). Tools are
 * passed natively. Token ids are read from vLLM's per-choice `token_ids` (with `return_token_ids`), else from the
 * `mcprl_token_ids` extension field that mcprl's own server puts on each choice, else from logprob entries named
 * `token_id:N` (vLLM's `return_tokens_as_token_ids`); logprobs from the standard `logprobs.content` field.
 */
export class OpenAIPolicy implements Policy {
  readonly name: string;
  private readonly client: OpenAI;
  private readonly opts: OpenAIPolicyOptions;

  constructor(opts: OpenAIPolicyOptions) {
    this.opts = opts;
    this.name = opts.model;
    this.client = new OpenAI({
      baseURL: opts.baseURL,
      apiKey: opts.apiKey ?? 'sk-no-key',
      maxRetries: opts.maxRetries ?? 2,
      timeout: opts.timeoutMs ?? 120_000,
    });
  }

  async next(req: PolicyRequest): Promise<PolicyTurn> {
    const body: Record<string, unknown> = {
      model: this.opts.model,
      messages: req.messages.map(toWireMessage),
      ...(req.tools.length > 0 ? { tools: req.tools } : {}),
      ...(this.opts.temperature !== undefined ? { temperature: this.opts.temperature } : {}),
      ...(this.opts.maxTokens !== undefined ? { max_tokens: this.opts.maxTokens } : {}),
      ...(req.seed !== undefined ? { seed: req.seed } : {}),
      ...(this.opts.logprobs || this.opts.tokenIds ? { logprobs: true } : {}),
      ...(this.opts.tokenIds ? { return_token_ids: true, return_tokens_as_token_ids: true } : {}),
      ...this.opts.extraBody,
    };
    let completion: OpenAI.Chat.Completions.ChatCompletion;
    try {
      completion = (await this.client.chat.completions.create(
        body as unknown as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming,
        { signal: req.signal },
      )) as OpenAI.Chat.Completions.ChatCompletion;
    } catch (err) {
      throw toPolicyError(err);
    }
    return parseCompletion(completion);
  }
}

/**
 * The message as a policy sends it, over HTTP or to the in-process engine alike (so both render the same prompt):
 * mcprl's private fields dropped so that any endpoint accepts it, and a tool answer's `name` too.
 */
export function toWireMessage(m: ChatMessage): ChatMessage {
  return {
    role: m.role,
    content: m.content,
    ...(m.tool_calls && m.tool_calls.length > 0 ? { tool_calls: m.tool_calls } : {}),
    ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
    ...(m.name !== undefined && m.role !== 'tool' ? { name: m.name } : {}),
  };
}

function toPolicyError(err: unknown): PolicyError {
  if (err instanceof PolicyError) return err;
  if (err instanceof APIError) {
    if (err.name === 'APIUserAbortError' || err.constructor.name === 'APIUserAbortError') {
      return new PolicyError('POLICY_ABORTED', 'policy request aborted', { cause: err });
    }
    if (err.status === undefined) {
      return new PolicyError('POLICY_UNREACHABLE', `policy endpoint unreachable: ${err.message}`, { cause: err });
    }
    return new PolicyError('POLICY_HTTP', `policy endpoint answered HTTP ${err.status}: ${err.message}`, {
      status: err.status,
      cause: err,
    });
  }
  const message = err instanceof Error ? err.message : String(err);
  return new PolicyError('POLICY_UNREACHABLE', `policy request failed: ${message}`, { cause: err });
}

/** Turns a chat completion into a PolicyTurn; exported for tests and for other OpenAI-shaped sources. */
export function parseCompletion(completion: OpenAI.Chat.Completions.ChatCompletion): PolicyTurn {
  const choice = completion.choices?.[0] as
    | (OpenAI.Chat.Completions.ChatCompletion.Choice & { token_ids?: unknown; mcprl_token_ids?: unknown; mcprl_invalid_tool_calls?: unknown; mcprl_sampler?: unknown })
    | undefined;
  if (!choice || !choice.message) {
    throw new PolicyError('POLICY_BAD_RESPONSE', 'policy endpoint returned no choices');
  }
  const msg = choice.message;
  const toolCalls: PolicyTurn['toolCalls'] = [];
  const invalidToolCalls: NonNullable<PolicyTurn['invalidToolCalls']> = [];
  for (const [i, tc] of (msg.tool_calls ?? []).entries()) {
    const fn = (tc as { function?: { name?: unknown; arguments?: unknown } }).function;
    if (!fn || typeof fn.name !== 'string' || fn.name.length === 0) {
      // A call with no function name cannot be answered by name; keep it as an unparseable call.
      invalidToolCalls.push({ raw: JSON.stringify(tc), error: 'tool call has no function name' });
      continue;
    }
    const args = typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {});
    toolCalls.push({ id: typeof tc.id === 'string' && tc.id ? tc.id : `call_${i}`, name: fn.name, arguments: args });
  }
  // mcprl's server reports the `<tool_call>` blocks it could not read here (they are in neither content nor
  // tool_calls). Without them the rollout loop would take the turn for an empty final answer and end, where the
  // in-process policy gets the parse error back and another turn: one checkpoint would score two ways.
  const unread = choice.mcprl_invalid_tool_calls;
  if (Array.isArray(unread)) {
    for (const u of unread as { raw?: unknown; error?: unknown }[]) {
      if (u && typeof u.raw === 'string' && typeof u.error === 'string') invalidToolCalls.push({ raw: u.raw, error: u.error });
    }
  }
  // With no call readable, mcprl's server (like vLLM's tool parsers) puts the whole raw text in `content`; the
  // turn keeps the text outside the tags, as the in-process policy has it, so both render the same history.
  let content = typeof msg.content === 'string' ? msg.content : null;
  if (content !== null && toolCalls.length === 0 && Array.isArray(unread) && unread.length > 0) content = parseToolCalls(content).content;
  // vLLM sends no such extension: when its Hermes parser cannot read one block it returns no call at all and
  // the whole text as `content` (as does a server started without a tool parser). Read the blocks here as the
  // in-process policy does — readable ones are calls, the others invalid calls whose parse error goes back to
  // the model — rather than taking the turn for a final answer.
  if (content !== null && toolCalls.length === 0 && invalidToolCalls.length === 0 && !Array.isArray(unread) && content.includes(TOOL_CALL_OPEN)) {
    const parsed = parseToolCalls(content);
    parsed.toolCalls.forEach((c, i) => toolCalls.push({ id: `call_${completion.id ?? 'x'}_${i}`, name: c.name, arguments: c.arguments }));
    invalidToolCalls.push(...parsed.invalidToolCalls.map((u) => ({ raw: u.raw, error: u.error })));
    content = parsed.content;
  }
  const turn: PolicyTurn = {
    content,
    toolCalls,
    finishReason: choice.finish_reason ?? 'stop',
  };
  if (invalidToolCalls.length > 0) turn.invalidToolCalls = invalidToolCalls;
  if (typeof completion.model === 'string' && completion.model !== '') turn.model = completion.model;
  const lp = choice.logprobs?.content;
  if (Array.isArray(lp) && lp.length > 0) turn.logprobs = lp.map((t) => t.logprob);
  const ids = [choice.token_ids, choice.mcprl_token_ids, Array.isArray(lp) ? lp.map((t) => idOfToken(t.token)) : undefined]
    .find((x) => Array.isArray(x) && x.length > 0 && x.every((v) => Number.isInteger(v)));
  if (ids) turn.tokenIds = ids as number[];
  // mcprl's server, asked for them (sampler logprobs), names the distribution each token was drawn from; the turn
  // then trains as the in-process policy's sampler turns do (ChatMessage.mcprl.temperature, constrained).
  const sampler = choice.mcprl_sampler as { logprobs?: unknown; temperature?: unknown; constrained?: unknown } | undefined;
  if (sampler && turn.tokenIds && Array.isArray(sampler.logprobs) && sampler.logprobs.length === turn.tokenIds.length
    && sampler.logprobs.every((v) => typeof v === 'number') && typeof sampler.temperature === 'number' && sampler.temperature > 0) {
    turn.logprobs = sampler.logprobs as number[];
    turn.logprobTemperature = sampler.temperature;
    if (sampler.constrained === true) turn.constrained = true;
  }
  return turn;
}

/** The id in a logprob entry's token named `token_id:N` (vLLM's return_tokens_as_token_ids), else null. */
function idOfToken(token: unknown): number | null {
  const m = typeof token === 'string' ? /^token_id:(\d+)$/.exec(token) : null;
  return m ? Number(m[1]) : null;
}
