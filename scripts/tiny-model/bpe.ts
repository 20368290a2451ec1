/**
 * A small byte-level BPE trainer that writes a Hugging Face `tokenizer.json` (the same layout as Qwen's:
 * NFC normaliser, the Qwen split regex, byte-level pre-tokeniser and decoder, BPE model with merges), so the
 * tiny model's tokenizer is loaded by exactly the code that loads any real model's.
 */
import { bytesToUnicode } from '../../src/chat/tokenizer.js';

/** The split regex of Qwen2/Qwen3 tokenizers (Oniguruma syntax, as stored in tokenizer.json). */
export const QWEN_SPLIT_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/**
 * The same with digits grouped in runs of up to three (as GPT-4's tokenizer does) instead of one by one: an id
 * such as bk-039 or a year becomes one or two tokens, which a very small model copies far more easily.
 */
export const GROUPED_DIGITS_SPLIT_REGEX = QWEN_SPLIT_REGEX.replace('|\\p{N}|', '|\\p{N}{1,3}|');

/** A tokenizer.json split pattern in JavaScript syntax (only the inline case-insensitive group differs). */
function jsSplit(pattern: string): RegExp {
  return new RegExp(pattern.replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)", "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"), 'gu');
}

export interface BpeOptions {
  /** Total vocabulary size including the 256 byte symbols and the special tokens. */
  vocabSize: number;
  /** Added tokens, in id order after the learned vocabulary. `special` ones are skipped when decoding with skip_special_tokens. */
  addedTokens: { content: string; special: boolean }[];
  /** Words seen fewer times than this do not contribute merges. Default 2. */
  minFrequency?: number;
  /** The pre-tokeniser's split pattern (Oniguruma syntax, as stored). Default QWEN_SPLIT_REGEX. */
  splitRegex?: string;
}

/** Trains merges on `texts` and returns the tokenizer.json object. Deterministic: ties break lexically. */
export function trainByteLevelBpe(texts: readonly string[], opts: BpeOptions): Record<string, unknown> {
  const byteChar = bytesToUnicode();
  const encoder = new TextEncoder();
  const counts = new Map<string, number>();
  const splitRegex = opts.splitRegex ?? QWEN_SPLIT_REGEX;
  const split = jsSplit(splitRegex);
  for (const text of texts) {
    for (const m of text.normalize('NFC').matchAll(split)) {
      const word = [...encoder.encode(m[0])].map((b) => byteChar[b]).join('');
      counts.set(word, (counts.get(word) ?? 0) + 1);
    }
  }
  const minFreq = opts.minFrequency ?? 2;
  const words: { symbols: string[]; count: number }[] = [...counts.entries()]
    .filter(([, c]) => c >= minFreq)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .map(([w, c]) => ({ symbols: [...w], count: c }));

  const vocab: Record<string, number> = {};
  const ordered = [...byteChar].sort((a, b) => a.codePointAt(0)! - b.codePointAt(0)!);
  for (const ch of ordered) vocab[ch] = Object.keys(vocab).length;
  const merges: [string, string][] = [];
  const target = opts.vocabSize - opts.addedTokens.length;
  while (Object.keys(vocab).length < target) {
    const pairs = new Map<string, number>();
    for (const w of words) {
      for (let i = 0; i + 1 < w.symbols.length; i++) {
        const key = w.symbols[i] + '\u0000' + w.symbols[i + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + w.count);
      }
    }
    let best = '';
    let bestCount = 0;
    for (const [key, c] of pairs) {
      if (c > bestCount || (c === bestCount && key < best)) {
        best = key;
        bestCount = c;
      }
    }
    if (bestCount < minFreq) break;
    const [a, b] = best.split('\u0000');
    const merged = a + b;
    merges.push([a, b]);
    if (!(merged in vocab)) vocab[merged] = Object.keys(vocab).length;
    for (const w of words) {
      const s = w.symbols;
      for (let i = 0; i + 1 < s.length; i++) {
        if (s[i] === a && s[i + 1] === b) s.splice(i, 2, merged);
      }
    }
  }
  const base = Object.keys(vocab).length;
  const added = opts.addedTokens.map((t, i) => ({
    id: base + i, content: t.content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: t.special,
  }));
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: { type: 'NFC' },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { Regex: splitRegex }, behavior: 'Isolated', invert: false }, byteLevel] },
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, ignore_merges: false,
      vocab,
      merges,
    },
  };
}
