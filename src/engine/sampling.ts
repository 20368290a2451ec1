/**
 * What a request asks of the sampler (SamplingParams, TokenConstraint) and what it reports (TokenAlternative), and
 * the shape of the one object per batch those settings cross into native code as (BatchSampling,
 * native/engine/sample.h), which the scheduler fills (src/engine/model.ts).
 */
import type { SampledTokens } from './native.js';

export interface SamplingParams {
  maxTokens: number;
  /** Default 1; 0 = greedy. */
  temperature?: number;
  /** Default 1 (off). */
  topP?: number;
  /** Default 0 (off). */
  topK?: number;
  /** Seeds sample i of the request with (seed, i): the same request with the same seed gives the same tokens. */
  seed?: number;
  stopTokenIds?: number[];
  /**
   * Alternatives to report per sampled token: the most likely tokens of the distribution `logprobs` is taken
   * from (temperature 1, whole vocabulary), with their logprobs. Default 0 (none); at most the vocabulary size.
   */
  topLogprobs?: number;
}

/** One of the most likely tokens at a position, with its log π at temperature 1 over the whole vocabulary. */
export interface TokenAlternative {
  tokenId: number;
  logprob: number;
}

/**
 * Restricts one sample's tokens step by step (constrained decoding). The engine asks `allowed()` before
 * drawing each token and calls `advance()` with the token drawn; the token is always one that was allowed.
 */
export interface TokenConstraint {
  /** The tokens allowed next, as a bitset over the vocabulary (ceil(V / 32) words), or null for every token. */
  allowed(): Uint32Array | null;
  advance(tokenId: number): void;
}

/** What a sample's settings default to when a request gives none (vLLM's and OpenAI's: the model's own distribution). */
export const SAMPLING_DEFAULTS = { temperature: 1, topP: 1, topK: 0, topLogprobs: 0 } as const;

/**
 * One batch's sampling settings as the engine reads them (BatchSampling in native/engine/sample.h): one entry per slot in
 * each array, every field required. maskIdx[i] picks slot i's allowed set in `masks` (bitsets of ceil(V / 32) words
 * over the vocabulary), −1 for none; both null: no masks.
 */
export interface BatchSampling {
  temperature: Float32Array;
  topP: Float32Array;
  topK: Int32Array;
  topLogprobs: Int32Array;
  maskIdx: Int32Array | null;
  masks: Uint32Array | null;
}

/**
 * Token masks as native code reads them: entry k of `masks` becomes an index into `bits` (−1 for none), each
 * distinct set object stored once, `words` (ceil(V / 32)) words each. Null when no entry has a set. The caller
 * checks each set's length, naming where it came from.
 */
export function packMasks(masks: readonly (Uint32Array | null)[], words: number): { idx: Int32Array; bits: Uint32Array } | null {
  const seen = new Map<Uint32Array, number>();
  const idx = Int32Array.from(masks, (m) => {
    if (!m) return -1;
    let k = seen.get(m);
    if (k === undefined) seen.set(m, (k = seen.size));
    return k;
  });
  if (seen.size === 0) return null;
  const bits = new Uint32Array(seen.size * words);
  for (const [m, k] of seen) bits.set(m, k * words);
  return { idx, bits };
}

/** Row i's first `n` alternatives from a native sample/step result. */
export function alternatives(res: SampledTokens, i: number, n: number): TokenAlternative[] {
  const out: TokenAlternative[] = [];
  for (let k = 0; k < n; k++) out.push({ tokenId: res.topIds[i * res.topWidth + k], logprob: res.topLogprobs[i * res.topWidth + k] });
  return out;
}
