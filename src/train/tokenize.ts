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
import type { TrainSequence } from '../engine/train-types.js';
import type { OpenAITool } from '../mcp/index.js';
import { McprlError } from '../util/errors.js';

export interface TokenizeOptions {
  /** Chat template variables used when the trajectory was generated (e.g. `{ enable_thinking: false }`). */
  chatTemplateKwargs?: Record<string, unknown>;
  /** Counts of how the trajectory's assistant turns met the trainer's tokenisation, added to (see TokenizationReport). */
  report?: TokenizationReport;
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
      ...(tools.length > 0 ? { tools } : {}),
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

  const report = opts.report;
  // A sampled turn differs when the template's rendering of it as the conversation's last turn does not give its ids.
  const checkTurn = (i: number) => {
    try {
      if (!sameIds(renderedTurn(engine, messages, i, tools, kwargs, stopIds), messages[i].mcprl!.token_ids)) report!.differs++;
    } catch {
      report!.differs++;
    }
  };
  // The last turn with sampled ids whose drift the next prompt has not yet shown (see TokenizationReport.differs).
  // The sequence it ended (only ever appended to) and its length then, so nothing is copied.
  let unchecked = null as { seq: number[]; len: number; i: number } | null;
  messages.forEach((m, i) => {
    if (m.role !== 'assistant') return;
    const prompt = promptFor(i);
    if (report && unchecked) {
      // The history as this prompt renders it reproduces the sampled ids: no drift, and nothing more to render.
      if (!startsWith(prompt, unchecked.seq, unchecked.len)) checkTurn(unchecked.i);
      unchecked = null;
    }
    let completion: number[];
    let completionLps: number[] | undefined;
    let completionMasks: (Uint32Array | null)[] | undefined;
    if (hasSampledIds(m)) {
      completion = m.mcprl.token_ids;
      completionLps = m.mcprl.logprobs;
      if (completionLps.length !== completion.length) {
        throw new McprlError('TOKENIZE', `message ${i}: ${completion.length} sampled token ids but ${completionLps.length} logprobs`);
      }
      // Sampler logprobs of a constrained turn are of the masked distribution: train over the same masks.
      if (m.mcprl.constrained && m.mcprl.temperature !== undefined) completionMasks = replayMasks(engine.toolCallConstrainer(tools), completion);
    } else {
      completion = renderedTurn(engine, messages, i, tools, kwargs, stopIds);
      if (report) {
        report.retokenized++;
        if (m.mcprl && m.mcprl.logprobs.length > 0 && m.mcprl.logprobs.length !== completion.length) report.differs++;
      }
    }
    if (report) report.turns++;
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
    if (report && hasSampledIds(m)) unchecked = { seq: ids, len: ids.length, i };
  });
  // The last sampled turn has no later prompt to show its drift: its own rendering is compared (once per trajectory).
  if (report && unchecked) checkTurn(unchecked.i);
  flush();
  return out;
}

/**
 * How the assistant turns of some trajectories met the trainer's own tokenisation: filled by trajectoryToSequences
 * (`opts.report`) as it tokenises, at the cost of two extra template renders per trajectory (its last turn's, and
 * a turn's own where the next prompt shows drift), or by tokenizationReport.
 */
export interface TokenizationReport {
  /** Assistant turns seen. */
  turns: number;
  /** Turns without sampled token ids (the policy could not return them): trained from their re-tokenised text. */
  retokenized: number;
  /**
   * Turns whose re-tokenised text differs from the sampled ids: for a turn with ids, the drift re-tokenising would
   * have brought — neither the next assistant turn's prompt (the template's rendering of the history, which
   * training renders anyway) extends the sampled ids, nor does the template's rendering of the turn as the last
   * one give them (rendered only when the first check fails, and for the last turn); for re-tokenised turns,
   * those whose length differs from the sampler's logprob count.
   */
  differs: number;
}

/** An empty report to add to. */
export function emptyTokenizationReport(): TokenizationReport {
  return { turns: 0, retokenized: 0, differs: 0 };
}

/**
 * Compares each assistant turn's sampled token ids (when the policy returned them) with the ids the trainer's
 * template and tokenizer give its text, so that drift is a figure rather than silent. The same walk as
 * trajectoryToSequences (whose sequences are dropped here): pass `opts.report` there instead when tokenising anyway.
 */
export function tokenizationReport(engine: ChatEngine, trajectories: { messages: ChatMessage[]; tools: OpenAITool[] }[], opts: TokenizeOptions = {}): TokenizationReport {
  const report = emptyTokenizationReport();
  for (const t of trajectories) {
    try {
      trajectoryToSequences(engine, t, 0, { ...opts, report });
    } catch {
      // A trajectory the trainer cannot tokenise at all drifts by definition (counted once).
      report.differs++;
    }
  }
  return report;
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
      tools: tools.length > 0 ? tools : undefined,
      addGenerationPrompt,
      ...(kwargs ? { kwargs } : {}),
    });
  const before = render(i, true);
  const through = render(i + 1, false);
  if (!through.startsWith(before)) {
    throw new McprlError('TOKENIZE', `message ${i}: the chat template does not render the conversation as a prefix of itself plus this turn, so the turn's tokens cannot be isolated`);
  }
  const ids = engine.tokenizer.encode(through.slice(before.length));
  const end = ids.findIndex((t) => stopIds.has(t));
  return end >= 0 ? ids.slice(0, end + 1) : ids;
}

/** Whether `a` starts with the first `n` entries of `prefix` (all of them by default). */
function startsWith(a: readonly number[], prefix: readonly number[], n = prefix.length): boolean {
  if (n > a.length) return false;
  for (let k = 0; k < n; k++) if (a[k] !== prefix[k]) return false;
  return true;
}

/** Whether an assistant turn carries the ids its policy sampled (else training re-tokenises its text). */
export function hasSampledIds(m: ChatMessage): m is ChatMessage & { mcprl: NonNullable<ChatMessage['mcprl']> } {
  return m.mcprl !== undefined && m.mcprl.token_ids.length > 0;
}

/** The message without mcprl's private fields, as an OpenAI client would send it. */
function plainMessage(m: ChatMessage): Record<string, unknown> & ChatMessage {
  const { mcprl: _omit, ...rest } = m;
  return rest;
}
