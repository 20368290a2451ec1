/**
 * OpenAI's chat-completions request and error, mapped onto the typed chat core (src/chat/chat-engine.ts):
 * a request body becomes a ChatTurnRequest, the core's refusals become OpenAI errors with an HTTP status,
 * and sampled tokens become OpenAI's logprob entries.
 */
import { z } from 'zod';
import { ChatError, type ChatTurnRequest } from '../chat/chat-engine.js';
import type { ChatMessage } from '../chat/message.js';
import type { HfTokenizer } from '../chat/tokenizer.js';
import { OpenAIToolSchema } from '../chat/tool.js';
import type { TokenAlternative } from '../engine/model.js';
import { McprlError } from '../util/errors.js';
import { safeParseFirst } from '../util/json-limits.js';

/** The most alternatives per token a request may ask for (OpenAI's and vLLM's limit). */
export const MAX_TOP_LOGPROBS = 20;

// ---------------------------------------------------------------------------------------------------------
// Request schema: the subset of OpenAI's chat-completions request mcprl serves, plus vLLM's `top_k`,
// `chat_template_kwargs`, `return_tokens_as_token_ids` and `return_token_ids`. A field not listed is refused
// (400 naming it) unless it is one of HARMLESS_FIELDS, or one of NO_OP_FIELDS at the value that changes
// nothing: a setting the server does not apply is never silently dropped.

const textPart = z.object({ type: z.literal('text'), text: z.string() });
const contentSchema = z.union([z.string(), z.array(textPart)]).nullish();
const toolCallSchema = z.object({
  id: z.string().optional(),
  type: z.literal('function').optional(),
  function: z.object({ name: z.string().min(1), arguments: z.union([z.string(), z.record(z.string(), z.unknown())]) }),
});

/**
 * A request message as OpenAI clients send it, converted to the one chat message shape (src/chat/message.ts):
 * text parts joined, `developer` read as `system`, nulls as absent fields, tool-call arguments sent as objects
 * written as JSON text (the template reads them back as objects). An assistant turn's `name` is dropped.
 */
export const chatMessageSchema = z
  .discriminatedUnion('role', [
    z.object({ role: z.literal('system'), content: contentSchema, name: z.string().optional() }),
    z.object({ role: z.literal('developer'), content: contentSchema, name: z.string().optional() }),
    z.object({ role: z.literal('user'), content: contentSchema, name: z.string().optional() }),
    z.object({
      role: z.literal('assistant'),
      content: contentSchema,
      name: z.string().optional(),
      tool_calls: z.array(toolCallSchema).nullish(),
      reasoning_content: z.string().nullish(),
    }),
    z.object({ role: z.literal('tool'), content: contentSchema, tool_call_id: z.string().optional(), name: z.string().optional() }),
  ])
  .transform((m): ChatMessage => toChatMessage(m));

/** A request message as sent, before conversion. */
type WireMessage = z.input<typeof chatMessageSchema>;

export const chatRequestSchema = z.object({
  /** Base model or adapter name, as listed by `/v1/models`. */
  model: z.string().min(1),
  messages: z.array(chatMessageSchema).min(1),
  tools: z.array(OpenAIToolSchema).nullish(),
  /**
   * `auto` (default: the model decides), `none` (the tools are neither shown nor parsed), `required` (the turn
   * opens with a call of one of the tools) or `{type: 'function', function: {name}}` (with a call of that tool).
   * `required` and a named function decode constrained to the tools' schemas.
   */
  tool_choice: z
    .union([z.enum(['auto', 'none', 'required']), z.object({ type: z.literal('function'), function: z.object({ name: z.string().min(1) }) })])
    .nullish(),
  /** false: at most one tool call per answer (decoded constrained). Default true. */
  parallel_tool_calls: z.boolean().nullish(),
  /**
   * `text` (default), `json_object` (the answer is one JSON object) or `json_schema` (one JSON object valid for
   * `json_schema.schema`; without a schema, any object), decoded constrained; with tools, an answer is either
   * tool calls or that object. A schema feature the decoder cannot enforce is a 400.
   */
  response_format: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('text') }),
      z.object({ type: z.literal('json_object') }),
      z.object({
        type: z.literal('json_schema'),
        json_schema: z.object({
          name: z.string().min(1).max(64),
          description: z.string().nullish(),
          schema: z.record(z.string(), z.unknown()).nullish(),
          strict: z.boolean().nullish(),
        }),
      }),
    ])
    .nullish(),
  /** Completions to sample from the one prompt. Default 1. */
  n: z.number().int().min(1).max(64).nullish(),
  /** Default 1. 0 is greedy. */
  temperature: z.number().min(0).max(2).nullish(),
  /** Default 1 (off). */
  top_p: z.number().gt(0).max(1).nullish(),
  /** vLLM extension. Default off (0 or -1). */
  top_k: z.number().int().min(-1).nullish(),
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  stop: z.union([z.string(), z.array(z.string())]).nullish(),
  seed: z.number().int().nullish(),
  /** Per-token logprobs in the answer. Default false. */
  logprobs: z.boolean().nullish(),
  /** Alternatives per token (with `logprobs: true`), from the same distribution as `logprob`. Default 0. */
  top_logprobs: z.number().int().min(0).max(MAX_TOP_LOGPROBS).nullish(),
  /** vLLM extension: logprob entries name their token `token_id:N` instead of its text. Default false. */
  return_tokens_as_token_ids: z.boolean().nullish(),
  /** vLLM extension: the answer carries `prompt_token_ids` and, per choice, `token_ids`. Default false. */
  return_token_ids: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  /** vLLM extension: extra chat template variables, e.g. `{ "enable_thinking": false }`. */
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
  /**
   * mcprl extension: decode tool calls constrained to the tools' schemas (src/chat/constrain.ts) when tools
   * are given and tool_choice is not `none`. Default: the server's setting (`mcprl serve`: on).
   */
  constrain_tool_calls: z.boolean().nullish(),
  /**
   * mcprl extension: each choice also carries `mcprl_sampler` = `{logprobs, temperature, constrained}`, the
   * log-probability of each sampled token under the distribution it was drawn from (softmax of logits ÷
   * temperature, over the tokens the tool-call constraint allowed when `constrained`; temperature 1 when greedy),
   * which a trainer that trains at the sampling temperature needs (`mcprl train --rollout-url`
   * `--train-at-sampling-temperature`). Default false.
   */
  mcprl_sampler_logprobs: z.boolean().nullish(),
});

/** Fields accepted and not applied, because they change nothing about the answer. */
export const HARMLESS_FIELDS: ReadonlySet<string> = new Set(['user', 'metadata', 'store', 'service_tier', 'prompt_cache_key', 'safety_identifier']);

/** Fields accepted at the value that changes nothing (what clients send as their default); any other value is a 400. */
export const NO_OP_FIELDS: Readonly<Record<string, (v: unknown) => boolean>> = {
  frequency_penalty: (v) => v === 0,
  presence_penalty: (v) => v === 0,
  logit_bias: (v) => typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length === 0,
  modalities: (v) => Array.isArray(v) && v.length === 1 && v[0] === 'text',
  functions: (v) => Array.isArray(v) && v.length === 0,
};

export type ChatRequest = z.input<typeof chatRequestSchema>;
type ParsedChatRequest = z.output<typeof chatRequestSchema>;

export type ChatErrorType = 'invalid_request_error' | 'server_error';

/** A request the server cannot serve, with the HTTP status and OpenAI error fields to answer it with. */
export class ChatRequestError extends McprlError<string | null> {
  readonly status: number;
  readonly type: ChatErrorType;
  readonly param: string | null;
  constructor(status: number, message: string, opts: { type?: ChatErrorType; param?: string | null; code?: string | null; cause?: unknown } = {}) {
    // `code` is OpenAI's (model_not_found, …) and often null, as OpenAI's own errors have it.
    super(opts.code ?? null, message, { cause: opts.cause });
    this.status = status;
    this.type = opts.type ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
    this.param = opts.param ?? null;
  }
}

/** OpenAI's error codes for the chat core's refusals that have one. */
const OPENAI_CODES: Partial<Record<ChatError['code'], string>> = {
  MODEL_NOT_FOUND: 'model_not_found',
  CONTEXT_LENGTH_EXCEEDED: 'context_length_exceeded',
};

/** The chat core's refusal as an OpenAI error; anything else passes through unchanged. */
export function toRequestError(err: unknown): unknown {
  if (!(err instanceof ChatError)) return err;
  return new ChatRequestError(err.status, err.message, { param: err.param, code: OPENAI_CODES[err.code] ?? null, cause: err });
}

/** Validates a request body; throws ChatRequestError (400) naming the offending field. */
export function parseChatRequest(body: unknown): ParsedChatRequest {
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    for (const [k, v] of Object.entries(body)) {
      // null is what an unset field is sent as by some clients; it asks for nothing.
      const noOp = Object.hasOwn(NO_OP_FIELDS, k) ? NO_OP_FIELDS[k] : undefined;
      if (Object.hasOwn(chatRequestSchema.shape, k) || HARMLESS_FIELDS.has(k) || v === null || v === undefined || noOp?.(v)) continue;
      const what = noOp ? `${k}: only the value that changes nothing is supported` : `${k}: not supported by this server`;
      throw new ChatRequestError(400, `Unsupported parameter: ${what}`, { param: k, code: 'unsupported_parameter' });
    }
  }
  // The first invalid field only: a body of millions of bad elements is not millions of issues.
  const r = safeParseFirst(chatRequestSchema, body);
  if (!r.success) {
    const issue = r.error.issues[0];
    const param = issue.path.map(String).join('.') || null;
    throw new ChatRequestError(400, param ? `Invalid request: ${param}: ${issue.message}` : `Invalid request: ${issue.message}`, { param });
  }
  const req = r.data;
  // A trainer replays the tool-call constraint of a plain request over the sampled tokens (src/train/tokenize.ts);
  // the recorded turn does not say which other constraint was used, so logprobs of one could not be trained on exactly.
  if (req.mcprl_sampler_logprobs) {
    const forced = (req.tool_choice === 'required' || typeof req.tool_choice === 'object') ? 'tool_choice' : req.parallel_tool_calls === false ? 'parallel_tool_calls' : req.response_format && req.response_format.type !== 'text' ? 'response_format' : null;
    if (forced) throw new ChatRequestError(400, `${forced}: not supported together with mcprl_sampler_logprobs (training replays only the plain tool-call constraint)`, { param: forced });
  }
  if (req.top_logprobs && req.logprobs !== true) {
    throw new ChatRequestError(400, 'when using `top_logprobs`, `logprobs` must be set to true', { param: 'top_logprobs' });
  }
  return req;
}

/** A validated request as the chat core takes it. */
export function toTurnRequest(req: ParsedChatRequest, signal?: AbortSignal): ChatTurnRequest {
  // tool_choice `none`: the tools are neither shown to the model nor parsed from its answer.
  const tools = req.tools && req.tools.length > 0 && req.tool_choice !== 'none' ? req.tools : undefined;
  const stop = req.stop === undefined || req.stop === null ? undefined : Array.isArray(req.stop) ? req.stop : [req.stop];
  const maxTokens = req.max_completion_tokens ?? req.max_tokens ?? undefined;
  const choice = req.tool_choice;
  const toolChoice = typeof choice === 'object' && choice !== null ? { name: choice.function.name } : choice === 'required' ? ('required' as const) : undefined;
  const rf = req.response_format;
  const responseFormat =
    rf?.type === 'json_schema' && rf.json_schema.schema ? { type: 'json_schema' as const, schema: rf.json_schema.schema } : rf && rf.type !== 'text' ? { type: 'json_object' as const } : undefined;
  return {
    model: req.model,
    messages: req.messages,
    ...(tools ? { tools } : {}),
    ...(req.chat_template_kwargs ? { chatTemplateKwargs: req.chat_template_kwargs } : {}),
    ...(req.constrain_tool_calls !== undefined && req.constrain_tool_calls !== null ? { constrainToolCalls: req.constrain_tool_calls } : {}),
    ...(toolChoice ? { toolChoice } : {}),
    ...(tools && req.parallel_tool_calls === false ? { parallelToolCalls: false } : {}),
    ...(responseFormat ? { responseFormat } : {}),
    sampling: {
      ...(req.n !== undefined && req.n !== null ? { n: req.n } : {}),
      ...(req.temperature !== undefined && req.temperature !== null ? { temperature: req.temperature } : {}),
      ...(req.top_p !== undefined && req.top_p !== null ? { topP: req.top_p } : {}),
      ...(req.top_k !== undefined && req.top_k !== null ? { topK: req.top_k } : {}),
      ...(maxTokens !== undefined ? { maxTokens } : {}),
      ...(stop ? { stop } : {}),
      ...(req.seed !== undefined && req.seed !== null ? { seed: req.seed } : {}),
      ...(req.logprobs && req.top_logprobs ? { topLogprobs: req.top_logprobs } : {}),
    },
    ...(signal ? { signal } : {}),
  };
}

function contentText(content: z.output<typeof contentSchema>): string | null {
  if (content === undefined || content === null) return null;
  if (typeof content === 'string') return content;
  return content.map((p) => p.text).join('');
}

function toChatMessage(m: WireMessage): ChatMessage {
  const content = contentText(m.content);
  switch (m.role) {
    case 'assistant': {
      const calls = (m.tool_calls ?? []).map((c) => ({
        ...(c.id !== undefined ? { id: c.id } : {}),
        type: 'function' as const,
        function: { name: c.function.name, arguments: typeof c.function.arguments === 'string' ? c.function.arguments : JSON.stringify(c.function.arguments) },
      }));
      return {
        role: 'assistant',
        content,
        ...(calls.length > 0 ? { tool_calls: calls } : {}),
        ...(m.reasoning_content !== undefined && m.reasoning_content !== null ? { reasoning_content: m.reasoning_content } : {}),
      };
    }
    case 'tool':
      return { role: 'tool', content, ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}), ...(m.name ? { name: m.name } : {}) };
    default:
      // OpenAI's newer `developer` role is the system prompt under another name; templates know `system`.
      return { role: m.role === 'developer' ? 'system' : m.role, content, ...(m.name ? { name: m.name } : {}) };
  }
}

export interface TokenLogprob {
  /** The token's text, or `token_id:N` with return_tokens_as_token_ids. */
  token: string;
  logprob: number;
  bytes: number[];
}

export interface TokenLogprobEntry extends TokenLogprob {
  top_logprobs: TokenLogprob[];
}

/** How a request wants its logprob entries written. */
export interface LogprobFormat {
  /** vLLM's `token_id:N` token names. */
  tokensAsIds: boolean;
}

function tokenEntry(tokenizer: HfTokenizer, id: number, logprob: number, f: LogprobFormat): TokenLogprob {
  return { token: f.tokensAsIds ? `token_id:${id}` : tokenizer.decode([id]), logprob, bytes: tokenizer.tokenBytes(id) };
}

/**
 * OpenAI's per-token logprob entries for a choice: each sampled token with its logprob and, when the request
 * asked for them, its alternatives (`top`, one list per token).
 */
export function tokenLogprobs(
  tokenizer: HfTokenizer,
  ids: readonly number[],
  logprobs: readonly number[],
  top: readonly (readonly TokenAlternative[])[] | undefined,
  f: LogprobFormat,
): TokenLogprobEntry[] {
  return ids.map((id, i) => ({
    ...tokenEntry(tokenizer, id, logprobs[i], f),
    top_logprobs: (top?.[i] ?? []).map((a) => tokenEntry(tokenizer, a.tokenId, a.logprob, f)),
  }));
}
