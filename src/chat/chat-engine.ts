/**
 * The chat core: messages and tools become prompt token ids (the model's own chat template, rendered and
 * tokenised), the engine samples completions, and each completion's tokens become text, content and tool calls
 * again. Typed all through: the agent's in-process policy and training call it directly, and `mcprl serve`
 * (src/serve) only maps OpenAI's JSON onto it, so a trained agent behaves the same whichever way it is reached.
 */
import { stat } from 'node:fs/promises';
import { basename, resolve } from 'node:path';
import { ChatTemplate, ChatTemplateError } from './chat-template.js';
import { EngineError, Model, modelLoadOptions, type ModelLoadOptions, type PrefixCacheStats, type KvCacheStats, type GeneratedSequence, type GenerateRequest, type SamplingParams } from '../engine/model.js';
import { SAMPLING_DEFAULTS } from '../engine/sampling.js';
import { HfTokenizer } from './tokenizer.js';
import { tokenTable, type ToolCallConstrainer, type ToolCallConstraint } from './constrain.js';
import type { ToolCallOptions } from './tool-call-grammar.js';
import { AdapterRoutes } from './adapter-routes.js';
import { LruCache } from '../util/lru.js';
import { ChatError, type ChatChoice, type ChatPrompt, type ChatResult, type ChatStreamEvent, type ChatTurnRequest } from './chat-turn.js';
import { promptChars, promptKey, toolsEnabled, toTemplateMessage } from './chat-prompt.js';
import { SampleState } from './sample-decoder.js';
import { ConstrainerCache, requestConstrainer, type ConstrainedTool, type ResponseFormat } from './request-constraint.js';

// The chat core's request and result types live in chat-turn.ts; this module is their entry point.
export { ChatError } from './chat-turn.js';
export type {
  ChatChoice,
  ChatErrorCode,
  ChatFinishReason,
  ChatPrompt,
  ChatResult,
  ChatSampling,
  ChatStreamEvent,
  ChatToolCall,
  ChatTurnRequest,
} from './chat-turn.js';

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

export interface ChatEngineOptions {
  /** The name the base model answers to. Default: the model folder's name. */
  modelName?: string;
  /**
   * Chat template variables applied to every request, under the request's own `chat_template_kwargs`.
   * Default `{}`: the template's own defaults (for Qwen3, the model may think before answering).
   */
  chatTemplateKwargs?: Record<string, unknown>;
  /** Completion length when a request gives no max_tokens. Default DEFAULT_MAX_TOKENS (never past the context). */
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
/** Completion length of a request that sets no max_tokens (`mcprl serve --max-tokens` changes it). */
export const DEFAULT_MAX_TOKENS = 1024;

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
  private readonly constrainers: ConstrainerCache;
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
    this.constrainers = new ConstrainerCache(() => tokenTable(this.tokenizer, this.model.config.vocabSize ?? this.tokenizer.size));
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
  toolCallConstrainer(tools: readonly ConstrainedTool[], opts: ToolCallOptions = {}): ToolCallConstrainer {
    return this.constrainers.toolCalls(tools, opts);
  }

  /**
   * The constrained-decoding grammar of a response format (cached per schema). Throws ChatError
   * (INVALID_REQUEST, param `response_format`) for a schema the grammar cannot enforce.
   */
  responseFormatConstrainer(format: ResponseFormat, tools: readonly ConstrainedTool[] = [], opts: ToolCallOptions = {}): ToolCallConstrainer {
    return this.constrainers.responseFormat(format, tools, opts);
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
    const maxTokens = requested ?? Math.min(this.opts.defaultMaxTokens ?? DEFAULT_MAX_TOKENS, room);
    const stop = (s.stop ?? []).filter((x) => x.length > 0);
    const sampling: SamplingParams = {
      maxTokens,
      temperature: s.temperature ?? SAMPLING_DEFAULTS.temperature,
      topP: s.topP ?? SAMPLING_DEFAULTS.topP,
      topK: s.topK !== undefined && s.topK > 0 ? s.topK : 0,
      stopTokenIds: this.stopTokenIds,
      ...(s.seed !== undefined ? { seed: s.seed } : {}),
      ...(s.topLogprobs ? { topLogprobs: s.topLogprobs } : {}),
    };
    const n = s.n ?? 1;
    const parseTools = toolsEnabled(req);
    const constrainer = requestConstrainer(req, this, this.opts.constrainToolCalls ?? false);
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
