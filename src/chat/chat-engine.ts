/**
 * The chat core: messages and tools become prompt token ids (the model's own chat template, rendered and
 * tokenised), the engine samples completions, and each completion's tokens become text, content and tool calls
 * again. Typed all through: the agent's in-process policy and training call it directly, and `mcprl serve`
 * (src/serve) only maps OpenAI's JSON onto it, so a trained agent behaves the same whichever way it is reached.
 */
import { randomBytes } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { basename, resolve } from 'node:path';
import { ChatTemplate, ChatTemplateError, type TemplateMessage, type TemplateTool } from './chat-template.js';
import { EngineError, Model, modelLoadOptions, type ModelLoadOptions, type PrefixCacheStats, type KvCacheStats, type GeneratedSequence, type GenerateRequest, type SamplingParams, type TokenAlternative } from '../engine/model.js';
import { parseToolCalls, stableContent, type InvalidToolCall } from './parse-tool-call.js';
import { HfTokenizer, IncrementalDecoder } from './tokenizer.js';
import { McprlError } from '../util/errors.js';
import { tokenTable, ToolCallConstrainer, type TokenTable, type ToolCallConstraint } from './constrain.js';
import { compileJsonGrammar, UnsupportedSchema, type ToolCallOptions } from './tool-call-grammar.js';
import { AdapterRoutes } from './adapter-routes.js';
import { LruCache } from '../util/lru.js';

/** The part of the engine's `Model` that chat uses (kept narrow so chat is clear about what it needs). */
export interface ChatModel {
  readonly dir: string;
  readonly config: { eosTokenIds: number[]; maxPositionEmbeddings?: number; vocabSize?: number };
  generate(req: GenerateRequest): Promise<GeneratedSequence[]>;
  adapterNames(): string[];
  loadAdapter(name: string, dir: string): Promise<void>;
  unloadAdapter(name: string): void;
  /** Generation requests waiting to be admitted and running now (src/engine/model.ts). */
  queue(): { waiting: number; running: number };
  /** The engine's prefix cache counters (src/engine/prefix-cache.ts), where it has one. */
  prefixCacheStats?(): PrefixCacheStats;
  /** The engine's KV cache budget and counters (src/engine/kv-cache.ts), where it has one. */
  kvCacheStats?(): KvCacheStats;
  close(): void;
}

// ---------------------------------------------------------------------------------------------------------
// Requests

/** A message of the conversation, in OpenAI's shape with plain-text content. */
export interface ChatTurnMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  /** Required except on an assistant turn that only calls tools. */
  content: string | null;
  tool_calls?: { id?: string; type?: 'function'; function: { name: string; arguments: string | Record<string, unknown> } }[] | null;
  tool_call_id?: string;
  name?: string;
  reasoning_content?: string | null;
}

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
  messages: ChatTurnMessage[];
  /** Tools offered to the model; when there are any, tool calls are also parsed from its answers. Default none. */
  tools?: TemplateTool[];
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

export interface ChatEngineOptions {
  /** The name the base model answers to. Default: the model folder's name. */
  modelName?: string;
  /**
   * Chat template variables applied to every request, under the request's own `chat_template_kwargs`.
   * Default `{}`: the template's own defaults (for Qwen3, the model may think before answering).
   */
  chatTemplateKwargs?: Record<string, unknown>;
  /** Completion length when a request gives no max_tokens. Default 1024 tokens (never past the context). */
  defaultMaxTokens?: number;
  /**
   * Decode tool calls constrained to the tools' schemas when a request gives tools (and tool_choice is not
   * `none`) and does not say otherwise (`constrain_tool_calls`). Default false.
   */
  constrainToolCalls?: boolean;
  /**
   * Prompts of more characters than this (messages, tool calls and tools) are tokenised on the tokenizer's worker
   * thread, so that a long one does not hold the event loop (tokenising is superlinear in a word's length).
   * Default 32,768 characters.
   */
  offThreadPromptChars?: number;
}

export interface LoadChatEngineOptions extends ChatEngineOptions, ModelLoadOptions {
  /** LoRA adapters to load: name → PEFT folder. */
  adapters?: { name: string; dir: string }[];
}

/** Name an adapter folder is served under when none is given: the folder's own name. */
export function adapterNameFromDir(dir: string): string {
  return basename(resolve(dir));
}

/** Prompts whose ids a ChatEngine remembers: more than a training step renders; at most 8M key characters. */
const PROMPT_CACHE = { maxEntries: 4096, maxWeight: 8 << 20, weigh: (key: string, ids: number[]) => key.length + ids.length };

export class ChatEngine {
  readonly model: ChatModel;
  readonly tokenizer: HfTokenizer;
  readonly template: ChatTemplate;
  /** The name the base model answers to. */
  readonly modelName: string;
  /** Folder of each adapter loaded by `load()` (for `/v1/models`). */
  readonly adapterDirs = new Map<string, string>();
  /** Stable served names for adapters that are replaced while served (see adapter-routes.ts). */
  readonly routes: AdapterRoutes;
  private readonly opts: ChatEngineOptions;
  private readonly stopTokenIds: number[];
  private readonly constrainers = new Map<string, ToolCallConstrainer>();
  /**
   * Prompt ids by the template's whole input (messages, tools, variables as JSON; the template and tokenizer are
   * fixed per engine). Rendering and tokenising are pure, and prompts repeat: a group's rollouts share their
   * first prompt, and training tokenises again every prompt its rollouts were sampled from.
   */
  private readonly promptCache = new LruCache<string, number[]>(PROMPT_CACHE);
  /** Ids of long prompts tokenised off the event loop (tokenizeOffThread), taken by start() for that request. */
  private readonly pretokenized = new WeakMap<ChatPrompt, number[]>();
  /** Per served name, the last addAdapter/removeAdapter on it: operations on one name run one at a time. */
  private readonly adapterOps = new Map<string, Promise<unknown>>();
  /** Engine names of adapters addAdapter is loading now (so that two loads never pick the same one). */
  private readonly loadingAdapters = new Set<string>();
  /** Requests waiting for a held route (see AdapterRoutes.hold). */
  private heldRequests = 0;
  /** Samples whose constraint met a state that allowed no token (never expected); they went on unconstrained. */
  constraintDeadEnds = 0;

  constructor(model: ChatModel, tokenizer: HfTokenizer, opts: ChatEngineOptions = {}) {
    this.model = model;
    this.tokenizer = tokenizer;
    this.template = ChatTemplate.fromTokenizer(tokenizer);
    this.modelName = opts.modelName ?? basename(resolve(model.dir));
    this.opts = opts;
    this.routes = new AdapterRoutes((adapter) => {
      this.adapterDirs.delete(adapter);
      this.model.unloadAdapter(adapter);
    });
    // A turn ends at any of the model's EOS ids (config.json / generation_config.json) or the tokenizer's
    // eos_token, which for chat models is the end-of-turn token (Qwen's <|im_end|>).
    const stops = new Set(model.config.eosTokenIds);
    const eos = tokenizer.eosToken !== null ? tokenizer.tokenToId(tokenizer.eosToken) : undefined;
    if (eos !== undefined) stops.add(eos);
    this.stopTokenIds = [...stops];
  }

  /** Loads a model folder, its tokenizer and any adapters. */
  static async load(modelDir: string, opts: LoadChatEngineOptions = {}): Promise<ChatEngine> {
    const names = new Set<string>();
    for (const a of opts.adapters ?? []) {
      if (names.has(a.name)) throw new Error(`two adapters are named ${a.name}`);
      names.add(a.name);
    }
    const tokenizer = await HfTokenizer.load(modelDir);
    const model = await Model.load(modelDir, modelLoadOptions(opts));
    try {
      const engine = new ChatEngine(model, tokenizer, opts);
      if (names.has(engine.modelName)) throw new Error(`an adapter may not share the base model's name ${engine.modelName}`);
      for (const a of opts.adapters ?? []) {
        await model.loadAdapter(a.name, a.dir);
        engine.adapterDirs.set(a.name, resolve(a.dir));
        // A route to itself, so that addAdapter can replace it and removeAdapter retire it like any other.
        engine.routes.set(a.name, a.name);
      }
      return engine;
    } catch (err) {
      model.close();
      throw err;
    }
  }

  /**
   * The constrained-decoding grammar of a tool list (cached per list): what generation used for a request with
   * these tools, and what training replays over the sampled tokens (src/chat/constrain.ts: replayMasks).
   */
  toolCallConstrainer(tools: readonly { type?: string; function: { name: string; parameters?: unknown } }[], opts: ToolCallOptions = {}): ToolCallConstrainer {
    const list = tools.map((t) => ({ name: t.function.name, parameters: t.function.parameters }));
    const o = { require: opts.require === true, single: opts.single === true };
    return this.cachedConstrainer(JSON.stringify([list, o.require, o.single]), (table) => new ToolCallConstrainer(table, list, o));
  }

  /**
   * The constrained-decoding grammar of a response format (cached per schema). Throws ChatError
   * (INVALID_REQUEST, param `response_format`) for a schema the grammar cannot enforce.
   */
  responseFormatConstrainer(
    format: NonNullable<ChatTurnRequest['responseFormat']>,
    tools: readonly { function: { name: string; parameters?: unknown } }[] = [],
    opts: ToolCallOptions = {},
  ): ToolCallConstrainer {
    const schema = format.type === 'json_object' ? { type: 'object' } : format.schema;
    const list = tools.map((t) => ({ name: t.function.name, parameters: t.function.parameters }));
    const o = { require: opts.require === true, single: opts.single === true };
    return this.cachedConstrainer(JSON.stringify(['json', schema, list, o.require, o.single]), (table) => {
      try {
        return new ToolCallConstrainer(table, compileJsonGrammar(schema, list, o));
      } catch (err) {
        if (!(err instanceof UnsupportedSchema)) throw err;
        throw new ChatError('INVALID_REQUEST', `response_format.json_schema.schema: ${err.message} cannot be enforced`, { param: 'response_format', cause: err });
      }
    });
  }

  private cachedConstrainer(key: string, make: (table: TokenTable) => ToolCallConstrainer): ToolCallConstrainer {
    let c = this.constrainers.get(key);
    if (!c) {
      c = make(tokenTable(this.tokenizer, this.model.config.vocabSize ?? this.tokenizer.size));
      if (this.constrainers.size >= 16) this.constrainers.delete(this.constrainers.keys().next().value!);
      this.constrainers.set(key, c);
    }
    return c;
  }

  /** The constraint a request decodes under, or null: its tool choice and response format, else constrainToolCalls. */
  private requestConstrainer(req: ChatTurnRequest): ToolCallConstrainer | null {
    const choice = req.toolChoice ?? 'auto';
    if (!req.tools || req.tools.length === 0) {
      if (choice !== 'auto') throw new ChatError('INVALID_REQUEST', 'tool_choice: a tool call cannot be required without tools', { param: 'tool_choice' });
      return req.responseFormat ? this.responseFormatConstrainer(req.responseFormat) : null;
    }
    const single = req.parallelToolCalls === false;
    let tools: readonly TemplateTool[] = req.tools;
    if (typeof choice === 'object') {
      tools = tools.filter((t) => t.function.name === choice.name);
      if (tools.length === 0) throw new ChatError('INVALID_REQUEST', `tool_choice: no tool is named ${JSON.stringify(choice.name)}`, { param: 'tool_choice' });
    }
    const opts = { require: choice !== 'auto', single };
    // Tools and a response format: the turn is calls, or the answer in that format.
    if (req.responseFormat) return this.responseFormatConstrainer(req.responseFormat, tools, opts);
    if (choice === 'auto' && !single) return (req.constrainToolCalls ?? this.opts.constrainToolCalls ?? false) ? this.toolCallConstrainer(req.tools) : null;
    return this.toolCallConstrainer(tools, opts);
  }

  /**
   * Names a request's `model` field may take: the base model first, then each route (see `routes`), then each
   * adapter that is neither behind a route nor hidden.
   */
  modelNames(): { id: string; adapter: string | null }[] {
    const routed = this.routes.list().map((r) => ({ id: r.name, adapter: r.adapter }));
    const plain = this.model.adapterNames().filter((a) => !this.routes.isInternal(a)).map((a) => ({ id: a, adapter: a }));
    return [{ id: this.modelName, adapter: null }, ...routed, ...plain];
  }

  /**
   * Serves the PEFT adapter folder `dir` under `name` (vLLM's `/v1/load_lora_adapter`). The folder is read by the
   * engine's PEFT reader (src/hf/peft.ts) and checked against the model before anything changes. With `replace`
   * an adapter served under `name` already is replaced: requests running on the old one finish on it, later ones
   * get the new one, and the old one is unloaded once its last request ends. Errors are ChatErrors:
   * ADAPTER_EXISTS, ADAPTER_NAME, ADAPTER_PATH_NOT_FOUND (404), ADAPTER_INVALID (with the reader's message).
   */
  addAdapter(name: string, dir: string, opts: { replace?: boolean } = {}): Promise<void> {
    return this.adapterOp(name, async () => {
      if (name === this.modelName) throw new ChatError('ADAPTER_NAME', `The lora adapter '${name}' would hide the base model of that name.`, { param: 'lora_name' });
      const served = this.modelNames().some((m) => m.id === name);
      if (served && !opts.replace) {
        throw new ChatError('ADAPTER_EXISTS', `The lora adapter '${name}' has already been loaded. To replace it, set 'load_inplace' to true.`, { param: 'lora_name' });
      }
      const abs = resolve(dir);
      const found = await stat(abs).then(() => true, () => false);
      if (!found) throw new ChatError('ADAPTER_PATH_NOT_FOUND', `Loading lora ${name} failed: No adapter found for ${dir}`, { param: 'lora_path' });
      // The engine's name for it: the served name, or the first free `name#k` while that is taken.
      const taken = new Set([...this.model.adapterNames(), ...this.loadingAdapters]);
      let adapter = name;
      for (let k = 1; taken.has(adapter); k++) adapter = `${name}#${k}`;
      this.loadingAdapters.add(adapter);
      try {
        await this.model.loadAdapter(adapter, abs);
      } catch (err) {
        if (err instanceof EngineError && err.code === 'ENGINE_LOAD') {
          throw new ChatError('ADAPTER_INVALID', `Loading lora ${name} failed: ${err.message}`, { param: 'lora_path', cause: err });
        }
        throw err;
      } finally {
        this.loadingAdapters.delete(adapter);
      }
      this.adapterDirs.set(adapter, abs);
      if (served) this.routeServedName(name);
      this.routes.set(name, adapter);
    });
  }

  /**
   * Stops serving `name` (vLLM's `/v1/unload_lora_adapter`): later requests for it get model_not_found, requests
   * running on it finish, and its adapter is unloaded once the last of them ends. ADAPTER_NOT_FOUND (404) when
   * no adapter is served under the name.
   */
  removeAdapter(name: string): Promise<void> {
    return this.adapterOp(name, async () => {
      if (name === this.modelName || !this.modelNames().some((m) => m.id === name)) {
        throw new ChatError('ADAPTER_NOT_FOUND', `The lora adapter '${name}' cannot be found.`, { param: 'lora_name' });
      }
      this.routeServedName(name);
      this.routes.delete(name);
    });
  }

  /**
   * Makes the served adapter name `name` a route, if it is not one: an adapter loaded straight into the model
   * (served under its own name) becomes a route to itself, so that replacing or removing it retires it.
   */
  private routeServedName(name: string): void {
    if (this.routes.target(name) === undefined) this.routes.set(name, name);
  }

  /** Runs `op` after every earlier adapter operation on `name` has finished. */
  private adapterOp(name: string, op: () => Promise<void>): Promise<void> {
    const before = this.adapterOps.get(name) ?? Promise.resolve();
    const run = before.then(op, op);
    const settled = run.catch(() => undefined);
    this.adapterOps.set(name, settled);
    void settled.then(() => {
      if (this.adapterOps.get(name) === settled) this.adapterOps.delete(name);
    });
    return run;
  }

  /** The engine's prefix cache counters and size (src/engine/prefix-cache.ts); null for a model without one. */
  prefixCacheStats(): PrefixCacheStats | null {
    return this.model.prefixCacheStats?.() ?? null;
  }

  /** The engine's KV cache budget, what it holds now and its peaks (src/engine/kv-cache.ts); null for a model without one. */
  kvCacheStats(): KvCacheStats | null {
    return this.model.kvCacheStats?.() ?? null;
  }

  /** Requests waiting: held by a route being replaced, or queued in the engine; and requests generating now. */
  queue(): { waiting: number; running: number } {
    const q = this.model.queue();
    return { waiting: this.heldRequests + q.waiting, running: q.running };
  }

  /** The adapter a model name selects (null: the base model); a 404 error for unknown names. */
  resolveAdapter(name: string): string | null {
    const hit = this.modelNames().find((m) => m.id === name);
    if (!hit) {
      throw new ChatError('MODEL_NOT_FOUND', `The model \`${name}\` does not exist. Served: ${this.modelNames().map((m) => m.id).join(', ')}`, {
        param: 'model',
      });
    }
    return hit.adapter;
  }

  /** Closes the model and stops the tokenizer's worker thread, if a long prompt ever started it. */
  close(): void {
    this.tokenizer.closeOffThread();
    this.model.close();
  }

  /**
   * Characters a prompt may hold and still fit the context: text of N characters takes at least
   * N / maxTokenChars tokens, halved for normalisation that may merge characters. Infinity without a context.
   */
  get maxPromptChars(): number {
    const context = this.model.config.maxPositionEmbeddings;
    return context === undefined ? Infinity : 2 * this.tokenizer.maxTokenChars * context;
  }

  /**
   * Prompt token ids: the messages and tools rendered by the model's chat template, with a generation prompt.
   * Remembered by what the template is given (see promptCache), so a prompt met again is not rendered again
   * (unless the template reads the clock: ChatTemplate.pure).
   */
  promptIds(prompt: ChatPrompt): number[] {
    const input = this.templateInput(prompt);
    const hit = this.template.pure ? this.promptCache.get(promptKey(input)) : undefined;
    if (hit) return hit.slice();
    const ids = this.tokenizer.encode(this.renderPrompt(input));
    this.remember(input, ids);
    return ids;
  }

  /** Keeps a prompt's ids in promptCache (unless the template reads the clock). */
  private remember(input: ReturnType<ChatEngine['templateInput']>, ids: number[]): void {
    if (this.template.pure) this.promptCache.set(promptKey(input), ids.slice());
  }

  /** What the chat template is given for a prompt (and what its ids are remembered by). */
  private templateInput(prompt: ChatPrompt) {
    return {
      messages: prompt.messages.map((m, i) => toTemplateMessage(m, i)),
      tools: toolsEnabled(prompt) ? prompt.tools : undefined,
      kwargs: { ...this.opts.chatTemplateKwargs, ...prompt.chatTemplateKwargs },
    };
  }

  /** The prompt's text: the messages and tools rendered by the model's chat template, with a generation prompt. */
  private renderPrompt({ messages, tools, kwargs }: ReturnType<ChatEngine['templateInput']>): string {
    try {
      return this.template.render(messages, { tools, addGenerationPrompt: true, kwargs });
    } catch (err) {
      if (err instanceof ChatTemplateError && err.code === 'TEMPLATE_RENDER') {
        throw new ChatError('TEMPLATE_RENDER', err.message, { param: 'messages', cause: err });
      }
      throw err;
    }
  }

  /**
   * A prompt longer than `offThreadPromptChars` is tokenised on the tokenizer's worker thread before start()
   * (which is synchronous) takes its ids, so that one long prompt cannot stop the server answering the others.
   * A prompt past the cheap length bound is left for start() to refuse without tokenising.
   */
  private async tokenizeOffThread(req: ChatTurnRequest): Promise<void> {
    const chars = promptChars(req);
    if (chars <= (this.opts.offThreadPromptChars ?? 32_768) || chars > this.maxPromptChars) return;
    const input = this.templateInput(req);
    const ids = await this.tokenizer.encodeOffThread(this.renderPrompt(input), req.signal ? { signal: req.signal } : {});
    this.pretokenized.set(req, ids);
    // Training tokenises the prompts its rollouts were sampled from again: they find these ids.
    this.remember(input, ids);
  }

  /** Runs a chat completion to the end. */
  async complete(req: ChatTurnRequest): Promise<ChatResult> {
    await this.waitForRoute(req.model ?? this.modelName);
    await this.tokenizeOffThread(req);
    const run = this.start(req, req.signal, null);
    return run.result;
  }

  /** Resolves once `name` is not held, counting the request as waiting meanwhile. */
  private async waitForRoute(name: string): Promise<void> {
    this.heldRequests++;
    try {
      await this.routes.ready(name);
    } finally {
      this.heldRequests--;
    }
  }

  /**
   * Runs a chat completion as a stream of events: a start event with the prompt's ids, content deltas (with the
   * tokens sampled since the last one) and, per choice, a finish event holding the complete choice. Validation
   * errors throw before the first event. Leaving the loop early aborts generation.
   */
  async *stream(req: ChatTurnRequest): AsyncGenerator<ChatStreamEvent, ChatResult> {
    await this.waitForRoute(req.model ?? this.modelName);
    await this.tokenizeOffThread(req);
    const signal = req.signal;
    const controller = new AbortController();
    const queue: ChatStreamEvent[] = [];
    let wake: (() => void) | null = null;
    const push = (e: ChatStreamEvent) => {
      queue.push(e);
      wake?.();
    };
    // Validation errors throw here, before anything is listening or running.
    const run = this.start(req, controller.signal, push);
    const onAbort = () => controller.abort(signal?.reason);
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    let done = false;
    let failure: unknown = null;
    let result: ChatResult | null = null;
    queue.push({ type: 'start', promptTokenIds: run.promptIds });
    run.result.then(
      (r) => {
        result = r;
        done = true;
        wake?.();
      },
      (err) => {
        failure = err;
        done = true;
        wake?.();
      },
    );
    try {
      for (;;) {
        while (queue.length > 0) yield queue.shift()!;
        if (done) break;
        await new Promise<void>((res) => (wake = res));
        wake = null;
      }
      while (queue.length > 0) yield queue.shift()!;
      if (failure) throw failure;
      return result!;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      if (!done) {
        controller.abort(new Error('stream closed by the consumer'));
        await run.result.catch(() => undefined);
      }
    }
  }

  /**
   * Checks and starts a completion. Checks happen synchronously, so that `stream()` callers learn of a bad
   * request before they write anything. `emit` receives stream events when given.
   */
  private start(req: ChatTurnRequest, signal: AbortSignal | undefined, emit: ((e: ChatStreamEvent) => void) | null): { promptIds: number[]; result: Promise<ChatResult> } {
    const model = req.model ?? this.modelName;
    const adapter = this.resolveAdapter(model);
    const context = this.model.config.maxPositionEmbeddings;
    // A cheap bound before the chat template and the tokenizer run (both synchronous, on the caller's thread).
    const chars = promptChars(req);
    if (chars > this.maxPromptChars) {
      throw new ChatError('CONTEXT_LENGTH_EXCEEDED', `The prompt holds ${chars} characters, more than fit in the model's context of ${context} tokens (checked before tokenising)`, {
        param: 'messages',
      });
    }
    const promptIds = this.pretokenized.get(req) ?? this.promptIds(req);
    this.pretokenized.delete(req);
    const s = req.sampling ?? {};
    const requested = s.maxTokens;
    if (context !== undefined && promptIds.length >= context) {
      throw new ChatError('CONTEXT_LENGTH_EXCEEDED', `The prompt is ${promptIds.length} tokens; the model's context is ${context} tokens`, {
        param: 'messages',
      });
    }
    if (requested !== undefined && context !== undefined && promptIds.length + requested > context) {
      throw new ChatError(
        'CONTEXT_LENGTH_EXCEEDED',
        `max_tokens ${requested} plus the prompt's ${promptIds.length} tokens exceed the model's context of ${context} tokens`,
        { param: 'max_tokens' },
      );
    }
    const room = context !== undefined ? context - promptIds.length : Infinity;
    const maxTokens = requested ?? Math.min(this.opts.defaultMaxTokens ?? 1024, room);
    const stop = (s.stop ?? []).filter((x) => x.length > 0);
    const sampling: SamplingParams = {
      maxTokens,
      temperature: s.temperature ?? 1,
      topP: s.topP ?? 1,
      topK: s.topK !== undefined && s.topK > 0 ? s.topK : 0,
      stopTokenIds: this.stopTokenIds,
      ...(s.seed !== undefined ? { seed: s.seed } : {}),
      ...(s.topLogprobs ? { topLogprobs: s.topLogprobs } : {}),
    };
    const n = s.n ?? 1;
    const parseTools = toolsEnabled(req);
    const constrainer = this.requestConstrainer(req);
    // The adapter stays loaded until this request ends, even when its route moves on to a newer one.
    this.routes.acquire(adapter);
    const generated = this.generateChoices(promptIds, adapter, sampling, n, stop, parseTools, constrainer, signal, emit).catch((err: unknown) => {
      // What the engine refuses about a request (a token or length it cannot take, samples and tokens that could
      // never fit the KV cache's budget together) is the caller's to fix.
      if (err instanceof EngineError && (err.code === 'ENGINE_REQUEST' || err.code === 'ENGINE_MEMORY')) throw new ChatError('ENGINE_REQUEST', err.message, { cause: err });
      throw err;
    }).finally(() => this.routes.release(adapter));
    const result = generated.then((choices) => ({ model, adapter, promptTokenIds: promptIds, choices }));
    return { promptIds, result };
  }

  private async generateChoices(
    promptIds: number[],
    adapter: string | null,
    sampling: SamplingParams,
    n: number,
    stop: string[],
    parseTools: boolean,
    constrainer: ToolCallConstrainer | null,
    signal: AbortSignal | undefined,
    emit: ((e: ChatStreamEvent) => void) | null,
  ): Promise<ChatChoice[]> {
    const samplerTemperature = sampling.temperature !== undefined && sampling.temperature > 0 ? sampling.temperature : 1;
    const withTop = (sampling.topLogprobs ?? 0) > 0;
    const samples = Array.from({ length: n }, (_, i) => new SampleState(this.tokenizer, i, stop, parseTools, emit, samplerTemperature, constrainer !== null, withTop));
    const constraints: ToolCallConstraint[] = [];
    const constraint = constrainer ? (i: number) => (constraints[i] = constrainer.start()) : undefined;
    const countDeadEnds = () => {
      this.constraintDeadEnds += constraints.filter((c) => c.deadEnd).length;
    };
    if (stop.length === 0) {
      // One request: the n samples share their prompt's prefill.
      const seqs = await this.model.generate({
        promptIds,
        n,
        adapter,
        sampling,
        signal,
        onToken: (s, tokenId, logprob, samplerLogprob, top) => samples[s]?.push(tokenId, logprob, samplerLogprob, top),
        ...(constraint ? { constraint } : {}),
      });
      countDeadEnds();
      throwIfAborted(signal);
      return seqs.map((seq, i) => samples[i].finish(seq));
    }
    // Stop strings end one sample at a time, which only a request of its own can do; each sample i gets
    // seed + i so that n samples with one seed still differ.
    const seqs = await Promise.all(
      samples.map(async (state, i) => {
        const own = new AbortController();
        const onAbort = () => own.abort(signal?.reason);
        signal?.addEventListener('abort', onAbort, { once: true });
        state.onStop = () => own.abort(new Error('stop string'));
        try {
          const [seq] = await this.model.generate({
            promptIds,
            n: 1,
            adapter,
            sampling: { ...sampling, ...(sampling.seed !== undefined ? { seed: sampling.seed + i } : {}) },
            signal: own.signal,
            onToken: (_s, tokenId, logprob, samplerLogprob, top) => state.push(tokenId, logprob, samplerLogprob, top),
            ...(constraint ? { constraint: () => constraint(i) } : {}),
          });
          return seq;
        } catch (err) {
          // An engine that rejects on abort: a stop string is still a normal end of this sample.
          if (state.stopped && !signal?.aborted) {
            const seq: GeneratedSequence = { tokenIds: state.ids, logprobs: state.lps, samplerLogprobs: state.slps, finishReason: 'abort' };
            if (withTop) seq.topLogprobs = state.tops;
            return seq;
          }
          throw err;
        } finally {
          signal?.removeEventListener('abort', onAbort);
        }
      }),
    );
    countDeadEnds();
    throwIfAborted(signal);
    return seqs.map((seq, i) => samples[i].finish(seq));
  }
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) {
    throw signal.reason instanceof Error ? signal.reason : new Error('chat completion aborted');
  }
}

function toolsEnabled(prompt: ChatPrompt): prompt is ChatPrompt & { tools: TemplateTool[] } {
  return !!prompt.tools && prompt.tools.length > 0;
}

/** The message as the template receives it: only the fields its role has. */
/** Characters of a request's messages, tool calls and tools: what the prompt holds besides the template's own text. */
/** What a prompt's ids are remembered by: the chat template's whole input. */
function promptKey(input: { messages: TemplateMessage[]; tools?: TemplateTool[]; kwargs: Record<string, unknown> }): string {
  return JSON.stringify([input.messages, input.tools ?? null, input.kwargs]);
}

function promptChars(prompt: ChatPrompt): number {
  let n = prompt.tools ? JSON.stringify(prompt.tools).length : 0;
  for (const m of prompt.messages) {
    if (typeof m.content === 'string') n += m.content.length;
    n += (m.reasoning_content ?? '').length;
    for (const c of m.tool_calls ?? []) {
      const args = c.function.arguments;
      n += c.function.name.length + (typeof args === 'string' ? args.length : JSON.stringify(args).length);
    }
  }
  return n;
}

function toTemplateMessage(m: ChatTurnMessage, i: number): TemplateMessage {
  const content = m.content;
  switch (m.role) {
    case 'assistant':
      return {
        role: 'assistant',
        content,
        ...(m.tool_calls && m.tool_calls.length > 0
          ? {
              tool_calls: m.tool_calls.map((tc) => ({
                id: tc.id,
                type: 'function' as const,
                function: { name: tc.function.name, arguments: tc.function.arguments },
              })),
            }
          : {}),
        ...(m.reasoning_content ? { reasoning_content: m.reasoning_content } : {}),
      };
    case 'tool':
      if (content === null) throw new ChatError('INVALID_MESSAGE', `messages.${i}.content: a tool message needs content`, { param: `messages.${i}.content` });
      return { role: 'tool', content, ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}), ...(m.name ? { name: m.name } : {}) };
    default:
      if (content === null) throw new ChatError('INVALID_MESSAGE', `messages.${i}.content: a ${m.role} message needs content`, { param: `messages.${i}.content` });
      return { role: m.role, content };
  }
}

/** Per-sample decoding: text so far, stop strings, what a stream has been sent. */
class SampleState {
  readonly ids: number[] = [];
  readonly lps: number[] = [];
  readonly slps: number[] = [];
  /** Alternatives of each token (filled only when the request asks for them). */
  readonly tops: TokenAlternative[][] = [];
  stopped = false;
  onStop: (() => void) | null = null;
  private readonly decoder: IncrementalDecoder;
  /** Tokens up to and including the one that completed a stop string. */
  private stopTokenCount = -1;
  private stopCharIndex = -1;
  private sentContent = '';
  private sentTokens = 0;

  constructor(
    private readonly tokenizer: HfTokenizer,
    private readonly index: number,
    private readonly stop: string[],
    private readonly parseTools: boolean,
    private readonly emit: ((e: ChatStreamEvent) => void) | null,
    private readonly samplerTemperature: number,
    private readonly constrained: boolean,
    private readonly withTop: boolean,
  ) {
    this.decoder = new IncrementalDecoder(tokenizer, { skipSpecialTokens: true });
  }

  push(tokenId: number, logprob: number, samplerLogprob: number, top: readonly TokenAlternative[]): void {
    if (this.stopped) return; // tokens the engine sampled before it saw the abort are not part of the turn
    this.ids.push(tokenId);
    this.lps.push(logprob);
    this.slps.push(samplerLogprob);
    if (this.withTop) this.tops.push([...top]);
    const before = this.decoder.current.length;
    this.decoder.push(tokenId);
    const text = this.decoder.current;
    if (this.stop.length > 0 && text.length > before) {
      const from = Math.max(0, before - Math.max(...this.stop.map((s) => s.length)) + 1);
      const hit = firstStop(text, this.stop, from);
      if (hit >= 0) {
        this.stopped = true;
        this.stopTokenCount = this.ids.length;
        this.stopCharIndex = hit;
        this.onStop?.();
      }
    }
    if (this.emit) this.emitDelta();
  }

  /** Builds the choice from the engine's final sequence (authoritative for ids and logprobs). */
  finish(seq: GeneratedSequence): ChatChoice {
    let ids = seq.tokenIds;
    let lps = seq.logprobs;
    let slps = seq.samplerLogprobs;
    let tops = this.withTop ? (seq.topLogprobs ?? []) : undefined;
    let finishReason: ChatFinishReason = seq.finishReason === 'length' ? 'length' : 'stop';
    if (this.stopTokenCount >= 0) {
      ids = ids.slice(0, this.stopTokenCount);
      lps = lps.slice(0, this.stopTokenCount);
      slps = slps.slice(0, this.stopTokenCount);
      tops = tops?.slice(0, this.stopTokenCount);
      finishReason = 'stop';
    }
    let text = this.tokenizer.decode(ids, { skipSpecialTokens: true });
    if (this.stopCharIndex >= 0) text = text.slice(0, this.stopCharIndex);
    let content: string | null = text;
    let toolCalls: ChatToolCall[] = [];
    let invalidToolCalls: InvalidToolCall[] = [];
    if (this.parseTools) {
      const parsed = parseToolCalls(text);
      content = parsed.content;
      toolCalls = parsed.toolCalls.map((c) => ({ id: `call_${randomBytes(12).toString('hex')}`, name: c.name, arguments: c.arguments }));
      invalidToolCalls = parsed.invalidToolCalls;
      if (toolCalls.length > 0 && finishReason === 'stop') finishReason = 'tool_calls';
    }
    const choice: ChatChoice = {
      index: this.index, text, content, toolCalls, invalidToolCalls, finishReason, tokenIds: ids, constrained: this.constrained,
      logprobs: lps, samplerLogprobs: slps, samplerTemperature: this.samplerTemperature,
      ...(tops ? { topLogprobs: tops } : {}),
    };
    if (this.emit) {
      // Whatever the stream has not sent yet: held-back text and tokens.
      const final = content ?? '';
      const rest = final.startsWith(this.sentContent) ? final.slice(this.sentContent.length) : '';
      if (rest.length > 0 || this.sentTokens < ids.length) {
        this.emit({
          type: 'delta', index: this.index, content: rest, tokenIds: ids.slice(this.sentTokens), logprobs: lps.slice(this.sentTokens),
          ...(tops ? { topLogprobs: tops.slice(this.sentTokens) } : {}),
        });
      }
      this.emit({ type: 'finish', index: this.index, choice });
    }
    return choice;
  }

  /** Sends the content that can no longer change, with the tokens sampled since the last send. */
  private emitDelta(): void {
    let text = this.decoder.current;
    if (this.stopCharIndex >= 0) text = text.slice(0, this.stopCharIndex);
    else if (this.stop.length > 0) text = text.slice(0, text.length - heldForStop(text, this.stop));
    const stable = this.parseTools ? stableContent(text) : text;
    if (stable.length <= this.sentContent.length || !stable.startsWith(this.sentContent)) return;
    const upto = this.stopTokenCount >= 0 ? this.stopTokenCount : this.ids.length;
    this.emit!({
      type: 'delta',
      index: this.index,
      content: stable.slice(this.sentContent.length),
      tokenIds: this.ids.slice(this.sentTokens, upto),
      logprobs: this.lps.slice(this.sentTokens, upto),
      ...(this.withTop ? { topLogprobs: this.tops.slice(this.sentTokens, upto) } : {}),
    });
    this.sentContent = stable;
    this.sentTokens = upto;
  }
}

/** Index of the earliest stop string occurrence at or after `from`, or -1. */
function firstStop(text: string, stop: string[], from: number): number {
  let best = -1;
  for (const s of stop) {
    const at = text.indexOf(s, from);
    if (at >= 0 && (best < 0 || at < best)) best = at;
  }
  return best;
}

/** Length of the longest suffix of text that could still grow into a stop string. */
function heldForStop(text: string, stop: string[]): number {
  let held = 0;
  for (const s of stop) {
    for (let k = Math.min(s.length - 1, text.length); k > held; k--) {
      if (text.endsWith(s.slice(0, k))) {
        held = k;
        break;
      }
    }
  }
  return held;
}
