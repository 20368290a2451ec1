/**
 * From trajectories to training sequences with assistant masks.
 *
 * Each assistant turn was sampled from a prompt: the conversation so far rendered by the model's chat template
 * with a generation prompt. We rebuild exactly that prompt with the engine's own renderer (`ChatEngine.promptIds`,
 * the code path generation used), and append the turn's tokens:
 * - turns sampled by the local engine carry their exact sampled ids and logprobs (`message.mcprl`), used as they
 *   are — no re-tokenisation drift, and the logprobs become log π_old; when they are the sampler's logprobs
 *   (`mcprl.temperature`), the sequence trains at that temperature, so the trainer's log π is of the same
 *   distribution (turns at different temperatures never share a sequence); when such a turn was decoded with
 *   constrained tool calls (`mcprl.constrained`), the constraint is replayed over its tokens so that each token's
 *   log π is renormalised over the same allowed set the sampler drew it from;
 * - other turns (scripted transcripts for SFT, remote policies) are the template's own rendering of the turn,
 *   up to and including the end-of-turn token.
 * Consecutive turns share one sequence when the next prompt extends the previous sequence token for token (the
 * usual case: fewer tokens to train on). When a template re-renders history differently from what was sampled,
 * the next turn starts a new sequence whose prefix is exactly the prompt the policy saw, so every assistant
 * token is always trained in its true context.
 */
import type { ChatMessage } from '../agent/policy.js';
import { replayMasks } from '../chat/constrain.js';
import type { ChatEngine } from '../chat/chat-engine.js';
import type { TemplateTool } from '../chat/chat-template.js';
import type { TrainSequence } from '../engine/train-types.js';
import type { OpenAITool } from '../mcp/index.js';
import { McprlError } from '../util/errors.js';

export interface TokenizeOptions {
  /** Chat template variables used when the trajectory was generated (e.g. `{ enable_thinking: false }`). */
  chatTemplateKwargs?: Record<string, unknown>;
}

export class TokenizeError extends McprlError<'TOKENIZE'> {
  constructor(message: string) {
    super('TOKENIZE', message);
  }
}

/** Token sequences (with loss masks and, when known, sampling logprobs) for one trajectory. */
export function trajectoryToSequences(
  engine: ChatEngine,
  trajectory: { messages: ChatMessage[]; tools: OpenAITool[] },
  advantage = 0,
  opts: TokenizeOptions = {},
): TrainSequence[] {
  const { messages, tools } = trajectory;
  const stopIds = stopIdsOf(engine);
  const kwargs = opts.chatTemplateKwargs;
  const promptFor = (upTo: number): number[] =>
    engine.promptIds({
      messages: messages.slice(0, upTo).map(plainMessage),
      ...(tools.length > 0 ? { tools: tools as TemplateTool[] } : {}),
      ...(kwargs ? { chatTemplateKwargs: kwargs } : {}),
    });

  const out: TrainSequence[] = [];
  let ids: number[] = [];
  let mask: number[] = [];
  let lps: number[] = [];
  let masks: (Uint32Array | null)[] = [];
  let sampled = true;
  let temperature: number | undefined;
  const flush = () => {
    if (ids.length > 0 && mask.some((m) => m === 1)) {
      out.push({
        tokenIds: ids, mask, advantage, ...(sampled ? { oldLogprobs: lps } : {}), ...(temperature !== undefined ? { temperature } : {}),
        ...(masks.some((m) => m) ? { tokenMasks: masks } : {}),
      });
    }
    ids = [];
    mask = [];
    lps = [];
    masks = [];
    sampled = true;
    temperature = undefined;
  };

  messages.forEach((m, i) => {
    if (m.role !== 'assistant') return;
    const prompt = promptFor(i);
    let completion: number[];
    let completionLps: number[] | undefined;
    let completionMasks: (Uint32Array | null)[] | undefined;
    if (m.mcprl && m.mcprl.token_ids.length > 0) {
      completion = m.mcprl.token_ids;
      completionLps = m.mcprl.logprobs;
      if (completionLps.length !== completion.length) {
        throw new TokenizeError(`message ${i}: ${completion.length} sampled token ids but ${completionLps.length} logprobs`);
      }
      // Sampler logprobs of a constrained turn are of the masked distribution: train over the same masks.
      if (m.mcprl.constrained && m.mcprl.temperature !== undefined) completionMasks = replayMasks(engine.toolCallConstrainer(tools), completion);
    } else {
      completion = renderedTurn(engine, messages, i, tools, kwargs, stopIds);
    }
    const turnTemperature = m.mcprl && m.mcprl.token_ids.length > 0 ? m.mcprl.temperature : undefined;
    if (!(ids.length > 0 && startsWith(prompt, ids) && turnTemperature === temperature)) {
      flush();
    }
    temperature = turnTemperature;
    for (let t = ids.length; t < prompt.length; t++) {
      ids.push(prompt[t]);
      mask.push(0);
      lps.push(0);
      masks.push(null);
    }
    completion.forEach((tok, k) => {
      ids.push(tok);
      mask.push(1);
      lps.push(completionLps ? completionLps[k] : 0);
      masks.push(completionMasks ? completionMasks[k] : null);
    });
    if (!completionLps) sampled = false;
  });
  flush();
  return out;
}

/** How the assistant turns of some trajectories met the trainer's own tokenisation (see tokenizationReport). */
export interface TokenizationReport {
  /** Assistant turns seen. */
  turns: number;
  /** Turns without sampled token ids (the policy could not return them): trained from their re-tokenised text. */
  retokenized: number;
  /**
   * Turns whose re-tokenised text differs from the sampled ids: for turns with ids, the drift re-tokenising would
   * have brought; for re-tokenised turns, those whose length differs from the sampler's logprob count.
   */
  differs: number;
}

/**
 * Compares each assistant turn's sampled token ids (when the policy returned them) with the ids the trainer's
 * template and tokenizer give its text, so that drift is a figure rather than silent.
 */
export function tokenizationReport(engine: ChatEngine, trajectories: { messages: ChatMessage[]; tools: OpenAITool[] }[], opts: TokenizeOptions = {}): TokenizationReport {
  const stopIds = stopIdsOf(engine);
  const r: TokenizationReport = { turns: 0, retokenized: 0, differs: 0 };
  for (const { messages, tools } of trajectories) {
    messages.forEach((m, i) => {
      if (m.role !== 'assistant') return;
      r.turns++;
      let ids: number[];
      try {
        ids = renderedTurn(engine, messages, i, tools, opts.chatTemplateKwargs, stopIds);
      } catch {
        r.differs++;
        return;
      }
      if (m.mcprl && m.mcprl.token_ids.length > 0) {
        if (!sameIds(ids, m.mcprl.token_ids)) r.differs++;
      } else {
        r.retokenized++;
        if (m.mcprl && m.mcprl.logprobs.length > 0 && m.mcprl.logprobs.length !== ids.length) r.differs++;
      }
    });
  }
  return r;
}

function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && startsWith(a, b);
}

function stopIdsOf(engine: ChatEngine): Set<number> {
  const stopIds = new Set(engine.model.config.eosTokenIds);
  const eos = engine.tokenizer.eosToken;
  if (eos !== null) {
    const id = engine.tokenizer.tokenToId(eos);
    if (id !== undefined) stopIds.add(id);
  }
  return stopIds;
}

/** The template's rendering of assistant message i, as tokens, cut after its first end-of-turn token. */
function renderedTurn(
  engine: ChatEngine,
  messages: ChatMessage[],
  i: number,
  tools: OpenAITool[],
  kwargs: Record<string, unknown> | undefined,
  stopIds: Set<number>,
): number[] {
  const render = (upTo: number, addGenerationPrompt: boolean) =>
    engine.template.render(messages.slice(0, upTo).map(plainMessage), {
      tools: tools.length > 0 ? (tools as TemplateTool[]) : undefined,
      addGenerationPrompt,
      ...(kwargs ? { kwargs } : {}),
    });
  const before = render(i, true);
  const through = render(i + 1, false);
  if (!through.startsWith(before)) {
    throw new TokenizeError(`message ${i}: the chat template does not render the conversation as a prefix of itself plus this turn, so the turn's tokens cannot be isolated`);
  }
  const ids = engine.tokenizer.encode(through.slice(before.length));
  const end = ids.findIndex((t) => stopIds.has(t));
  return end >= 0 ? ids.slice(0, end + 1) : ids;
}

function startsWith(a: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > a.length) return false;
  for (let k = 0; k < prefix.length; k++) if (a[k] !== prefix[k]) return false;
  return true;
}

/** The message without mcprl's private fields, as an OpenAI client would send it. */
function plainMessage(m: ChatMessage): Record<string, unknown> & ChatMessage {
  const { mcprl: _omit, ...rest } = m;
  return rest;
}
