/**
 * What a request asks of the sampler (SamplingParams, TokenConstraint) and what it reports (TokenAlternative), and
 * the one object per batch those settings cross into native code as (BatchSampling, native/engine/sample.h).
 */
import { EngineError, type SampledTokens } from './native.js';

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
 * The batch's sampling settings as the engine reads them, one entry per sample: each sample's settings (their
 * defaults here) and its constraint's allowed set now, each distinct set object sent once.
 */
export function batchSampling(samples: readonly (readonly [SamplingParams, TokenConstraint | null])[], vocabSize: number): BatchSampling {
  const sp = samples.map(([s]) => s);
  return {
    temperature: Float32Array.from(sp, (s) => s.temperature ?? SAMPLING_DEFAULTS.temperature),
    topP: Float32Array.from(sp, (s) => s.topP ?? SAMPLING_DEFAULTS.topP),
    topK: Int32Array.from(sp, (s) => s.topK ?? SAMPLING_DEFAULTS.topK),
    topLogprobs: Int32Array.from(sp, (s) => s.topLogprobs ?? SAMPLING_DEFAULTS.topLogprobs),
    ...masks(samples.map(([, c]) => c), vocabSize),
  };
}

function masks(constraints: (TokenConstraint | null)[], vocabSize: number): Pick<BatchSampling, 'maskIdx' | 'masks'> {
  if (!constraints.some((c) => c)) return { maskIdx: null, masks: null };
  const words = Math.ceil(vocabSize / 32);
  const seen = new Map<Uint32Array, number>();
  const maskIdx = Int32Array.from(constraints, (c) => {
    const m = c?.allowed() ?? null;
    if (!m) return -1;
    if (m.length !== words) throw new EngineError('ENGINE_REQUEST', `a token mask has ${m.length} words; the vocabulary needs ${words}`);
    let k = seen.get(m);
    if (k === undefined) seen.set(m, (k = seen.size));
    return k;
  });
  if (seen.size === 0) return { maskIdx: null, masks: null };
  const bits = new Uint32Array(seen.size * words);
  for (const [m, k] of seen) bits.set(m, k * words);
  return { maskIdx, masks: bits };
}

/** Row i's first `n` alternatives from a native sample/step result. */
export function alternatives(res: SampledTokens, i: number, n: number): TokenAlternative[] {
  const out: TokenAlternative[] = [];
  for (let k = 0; k < n; k++) out.push({ tokenId: res.topIds[i * res.topWidth + k], logprob: res.topLogprobs[i * res.topWidth + k] });
  return out;
}
