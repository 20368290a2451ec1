/**
 * The in-process policy: the local engine answering the rollout loop directly, with no HTTP in between.
 * Each turn keeps the exact sampled token ids and their logprobs, and reports `<tool_call>` blocks the
 * model got wrong as invalid calls (data for the reward), never as errors.
 */
import type { Policy, PolicyContext, PolicyRequest, PolicyTurn } from './policy.js';
import { PolicyError, toWireMessage } from './policy.js';
import { ChatError, type ChatEngine } from '../chat/chat-engine.js';

export interface EnginePolicyOptions {
  /** Base model or adapter name to answer with (see ChatEngine.modelNames()). Default: the base model. */
  model?: string;
  /** Sampling temperature of every turn. Default: the engine's (SAMPLING_DEFAULTS, 1). */
  temperature?: number;
  /** Nucleus sampling mass. Default 1 (off). */
  topP?: number;
  /** Top-k sampling. Default off. */
  topK?: number;
  /** Cap on tokens per turn. Default: the engine's (1024 tokens). */
  maxTokens?: number;
  /** Chat template variables for every turn, e.g. `{ enable_thinking: false }`. Default none. */
  chatTemplateKwargs?: Record<string, unknown>;
  /**
   * Record the sampler's logprobs (softmax of logits ÷ temperature) with the temperature, instead of the
   * model's log π at temperature 1, so that training optimises the policy that sampled. Default false.
   */
  samplerLogprobs?: boolean;
  /** Decode tool calls constrained to the tools' schemas (src/chat/constrain.ts). Default: the engine's setting. */
  constrainToolCalls?: boolean;
}

export class EnginePolicy implements Policy {
  /** The model name turns are generated with; assignable, e.g. to switch to a freshly loaded adapter. */
  model: string;
  private readonly engine: ChatEngine;
  private readonly opts: EnginePolicyOptions;

  constructor(engine: ChatEngine, opts: EnginePolicyOptions = {}) {
    this.engine = engine;
    this.opts = opts;
    this.model = opts.model ?? engine.modelName;
  }

  get name(): string {
    return this.model;
  }

  get context(): PolicyContext {
    const engine = this.engine;
    const window = engine.model.config.maxPositionEmbeddings ?? Infinity;
    return {
      room: (messages, tools) => {
        const prompt = engine.promptIds({
          messages: messages.map(toWireMessage),
          ...(tools.length > 0 ? { tools } : {}),
          ...(this.opts.chatTemplateKwargs ? { chatTemplateKwargs: this.opts.chatTemplateKwargs } : {}),
        });
        return window - prompt.length - (this.opts.maxTokens ?? 0);
      },
      count: (text) => engine.tokenizer.encode(text).length,
      prefix: (text, tokens) => (tokens <= 0 ? '' : engine.tokenizer.decode(engine.tokenizer.encode(text).slice(0, tokens))),
    };
  }

  async next(req: PolicyRequest): Promise<PolicyTurn> {
    const { temperature, maxTokens } = this.opts;
    let result;
    try {
      result = await this.engine.complete({
        model: this.model,
        messages: req.messages.map(toWireMessage),
        ...(req.tools.length > 0 ? { tools: req.tools } : {}),
        ...(this.opts.chatTemplateKwargs ? { chatTemplateKwargs: this.opts.chatTemplateKwargs } : {}),
        ...(this.opts.constrainToolCalls !== undefined ? { constrainToolCalls: this.opts.constrainToolCalls } : {}),
        sampling: {
          ...(temperature !== undefined ? { temperature } : {}),
          ...(this.opts.topP !== undefined ? { topP: this.opts.topP } : {}),
          ...(this.opts.topK !== undefined ? { topK: this.opts.topK } : {}),
          ...(maxTokens !== undefined ? { maxTokens } : {}),
          ...(req.seed !== undefined ? { seed: req.seed } : {}),
        },
        ...(req.signal ? { signal: req.signal } : {}),
      });
    } catch (err) {
      if (req.signal?.aborted) throw new PolicyError('POLICY_ABORTED', 'policy request aborted', { cause: err });
      // The same status the request would get from `mcprl serve`, so both policies fail alike.
      if (err instanceof ChatError) {
        throw new PolicyError('POLICY_HTTP', `engine refused the request (${err.status}): ${err.message}`, { status: err.status, cause: err });
      }
      throw new PolicyError('POLICY_UNREACHABLE', `engine failed: ${(err as Error).message}`, { cause: err });
    }
    const c = result.choices[0];
    const turn: PolicyTurn = {
      content: c.content,
      toolCalls: c.toolCalls.map((t) => ({ id: t.id, name: t.name, arguments: t.arguments })),
      finishReason: c.finishReason,
      tokenIds: c.tokenIds,
      ...(this.opts.samplerLogprobs
        ? { logprobs: c.samplerLogprobs, logprobTemperature: c.samplerTemperature }
        : { logprobs: c.logprobs }),
      ...(c.constrained ? { constrained: true } : {}),
    };
    if (c.invalidToolCalls.length > 0) turn.invalidToolCalls = c.invalidToolCalls.map((t) => ({ raw: t.raw, error: t.error }));
    return turn;
  }
}
