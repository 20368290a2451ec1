/**
 * One sample of a chat turn as its tokens arrive: the text decoded so far, where a stop string cut it, what a
 * stream has been sent, and at the end the choice (content and tool calls parsed from the text).
 */
import { randomBytes } from 'node:crypto';
import type { GeneratedSequence, TokenAlternative } from '../engine/model.js';
import type { ChatChoice, ChatFinishReason, ChatStreamEvent, ChatToolCall } from './chat-turn.js';
import { parseToolCalls, stableContent, type InvalidToolCall } from './parse-tool-call.js';
import { IncrementalDecoder, type HfTokenizer } from './tokenizer.js';

/** Per-sample decoding: text so far, stop strings, what a stream has been sent. */
export class SampleState {
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
