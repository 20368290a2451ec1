/**
 * What one chat turn asks of the chat core (src/chat/chat-engine.ts) and what it returns: the request with its
 * sampling settings and constraints, the sampled choices, the stream's events, and the refusals (ChatError)
 * that are the caller's to fix.
 */
import type { ChatMessage } from './message.js';
import type { InvalidToolCall } from './parse-tool-call.js';
import type { OpenAITool } from './tool.js';
import type { TokenAlternative } from '../engine/model.js';
import { McprlError } from '../util/errors.js';

/** How completions are sampled. */
export interface ChatSampling {
  /** Completions to sample from the one prompt. Default 1. */
  n?: number;
  /** Default 1. 0 is greedy. */
  temperature?: number;
  /** Nucleus sampling mass. Default 1 (off). */
  topP?: number;
  /** Top-k sampling. Default 0 (off). */
  topK?: number;
  /** Completion length in tokens. Default: the engine's defaultMaxTokens, never past the context. */
  maxTokens?: number;
  /** Strings that end a completion (cut before them). Default none. */
  stop?: string[];
  /** Sampling seed. Default: a random one. */
  seed?: number;
  /**
   * Most likely tokens to report beside each sampled one (OpenAI's `top_logprobs`), from the distribution
   * `logprobs` is taken from: temperature 1, the whole vocabulary. Default 0 (none).
   */
  topLogprobs?: number;
}

/** What to render: the conversation and the tools offered. */
export interface ChatPrompt {
  messages: ChatMessage[];
  /** Tools offered to the model; when there are any, tool calls are also parsed from its answers. Default none. */
  tools?: OpenAITool[];
  /** Chat template variables for this request, over the engine's own. Default none. */
  chatTemplateKwargs?: Record<string, unknown>;
}

export interface ChatTurnRequest extends ChatPrompt {
  /** Base model or adapter name, as listed by `modelNames()`. Default: the base model. */
  model?: string;
  sampling?: ChatSampling;
  /**
   * Decode tool calls constrained to the tools' schemas (src/chat/constrain.ts) when tools are given.
   * Default: the engine's constrainToolCalls.
   */
  constrainToolCalls?: boolean;
  /**
   * Whether the turn must call a tool: `auto` (the model decides), `required` (it opens with a call of one of
   * the tools) or `{name}` (with a call of that tool). Needs tools. Anything but `auto` is decoded constrained,
   * whatever constrainToolCalls says. Default `auto`.
   */
  toolChoice?: 'auto' | 'required' | { name: string };
  /** false: at most one tool call per turn (decoded constrained, whatever constrainToolCalls says). Default true. */
  parallelToolCalls?: boolean;
  /**
   * The answer is one JSON object: any (`json_object`) or one valid for `schema` (`json_schema`), decoded
   * constrained (src/chat/tool-call-grammar.ts: compileJsonGrammar); with tools, the turn is either calls
   * (decoded constrained, as toolChoice and parallelToolCalls allow) or that answer. Default: free text.
   */
  responseFormat?: { type: 'json_object' } | { type: 'json_schema'; schema: Record<string, unknown> };
  signal?: AbortSignal;
}

// ---------------------------------------------------------------------------------------------------------
// Results

export interface ChatToolCall {
  id: string;
  name: string;
  /** JSON object text. */
  arguments: string;
}

export type ChatFinishReason = 'stop' | 'length' | 'tool_calls';

export interface ChatChoice {
  index: number;
  /** The whole decoded completion (special tokens dropped, cut before a stop string). */
  text: string;
  content: string | null;
  toolCalls: ChatToolCall[];
  /** `<tool_call>` blocks that could not be read; the model's doing, so reported, not thrown. */
  invalidToolCalls: InvalidToolCall[];
  finishReason: ChatFinishReason;
  /** Exactly the sampled token ids, including the end-of-turn token when the model produced one. */
  tokenIds: number[];
  /** Tool calls were decoded constrained to the tools' schemas (samplerLogprobs are then of the masked distribution). */
  constrained: boolean;
  /** log π(token) at temperature 1 for each of tokenIds (the engine's logπ, whatever the sampling settings). */
  logprobs: number[];
  /** For each of tokenIds, its sampling.topLogprobs most likely alternatives (same distribution as logprobs); only when asked for. */
  topLogprobs?: TokenAlternative[][];
  /**
   * log-probability of each of tokenIds under the distribution it was drawn from: softmax of logits ÷
   * `samplerTemperature` over the tokens the tool-call constraint allowed (before top-k/top-p). The policy's
   * log π_old for training at the sampling temperature.
   */
  samplerLogprobs: number[];
  /** The temperature samplerLogprobs are at: the request's, or 1 when it decoded greedily. */
  samplerTemperature: number;
}

export interface ChatResult {
  /** The model name the completions came from. */
  model: string;
  /** The adapter that generated them (null: the base model); for a route, the adapter it pointed at when the request began. */
  adapter: string | null;
  promptTokenIds: number[];
  choices: ChatChoice[];
}

/**
 * One step of a streamed completion. The first is `start`, once the request has been checked, with the prompt's
 * token ids (what the engine rendered and tokenised, so a server need not do it again for vLLM's prompt_token_ids).
 */
export type ChatStreamEvent =
  | { type: 'start'; promptTokenIds: number[] }
  | { type: 'delta'; index: number; content: string; tokenIds: number[]; logprobs: number[]; topLogprobs?: TokenAlternative[][] }
  | { type: 'finish'; index: number; choice: ChatChoice };

export type ChatErrorCode =
  | 'MODEL_NOT_FOUND'
  | 'CONTEXT_LENGTH_EXCEEDED'
  | 'INVALID_MESSAGE'
  | 'TEMPLATE_RENDER'
  | 'ENGINE_REQUEST'
  | 'INVALID_REQUEST' // a setting the request cannot have: tool_choice naming no tool, a response schema the grammar cannot enforce
  | 'ADAPTER_EXISTS' // addAdapter: the name is served already (and replace was not asked for)
  | 'ADAPTER_NAME' // addAdapter: the name is the base model's
  | 'ADAPTER_PATH_NOT_FOUND' // addAdapter: nothing at the path
  | 'ADAPTER_INVALID' // addAdapter: the folder is not a PEFT adapter this model can take
  | 'ADAPTER_NOT_FOUND'; // removeAdapter: no adapter is served under the name

/** Codes that mean "no such thing" (HTTP 404); the others are the request's fault (400). */
const NOT_FOUND_CODES: ReadonlySet<ChatErrorCode> = new Set(['MODEL_NOT_FOUND', 'ADAPTER_PATH_NOT_FOUND', 'ADAPTER_NOT_FOUND']);

/**
 * A request the chat engine refuses: the caller's to fix. `status` is the HTTP status `mcprl serve` answers
 * it with (404 for an unknown model, 400 otherwise), so the in-process policy can report the same; `param`
 * names the request field at fault, as OpenAI's API names it.
 */
export class ChatError extends McprlError<ChatErrorCode> {
  readonly status: 400 | 404;
  readonly param: string | null;
  constructor(code: ChatErrorCode, message: string, opts: { param?: string | null; cause?: unknown } = {}) {
    super(code, message, { cause: opts.cause });
    this.status = NOT_FOUND_CODES.has(code) ? 404 : 400;
    this.param = opts.param ?? null;
  }
}
