/**
 * Schema-constrained tool calls: once the model opens `<tool_call>`, the tokens it may sample are restricted,
 * step by step, to those that keep the text a prefix of `{"name": <a tool>, "arguments": <an object valid for
 * that tool's input schema>}</tool_call>` (tool-call-grammar.ts); text outside tool calls stays free. The model
 * still decides whether to call a tool, which one and with what values.
 *
 * A token is allowed in a state when every byte of it can come next. The tokens are sorted by their bytes once
 * per tokenizer, so that walking them in order is a walk of their trie: tokens sharing a prefix share its
 * steps, and a prefix that cannot come next rules out every token under it at once. In the two states that
 * hold most of a turn — free text, and the inside of a string with no length bounds or pattern — most tokens cannot change
 * the state (no `<`; no quote, backslash or control byte), so those are allowed without a walk and only the
 * rest are walked (about a tenth of a 151k vocabulary). The allowed set of a state
 * (a bitset over the vocabulary) is cached by the state's key; states repeat a lot (every free-text position
 * is one state), so most steps cost a lookup. A state whose tokens are all allowed gets no mask at all, so
 * free text is sampled exactly as without the constraint. Tokens with no text (special tokens such as
 * `<|im_end|>`, ids past the tokenizer) may come only in free text: a turn cannot end inside a call.
 *
 * The same machinery enforces what a request may ask beyond that (tool-call-grammar.ts): a turn that must open
 * with a call (tool_choice `required`, or a named function with only that tool in the grammar), at most one call
 * (parallel_tool_calls false), and a turn that is one JSON object of a schema (response_format).
 *
 * Training replays the same constraint over the sampled tokens (`replayMasks`) to renormalise log π over the
 * same allowed sets the sampler used, so the GRPO ratio stays exact.
 */
import type { HfTokenizer } from './tokenizer.js';
import { compileToolCallGrammar, isFree, startState, stateKey, step, type GrammarState, type ToolCallGrammar, type ToolCallOptions } from './tool-call-grammar.js';

/** What the engine asks of a constraint (structurally TokenConstraint in src/engine/model.ts). */
export interface ToolCallConstraint {
  allowed(): Uint32Array | null;
  advance(tokenId: number): void;
  /** Set once a state had no allowed token (never expected): the rest of the turn was decoded unconstrained. */
  readonly deadEnd: boolean;
}

/** Token ids in byte order, each with the length of the prefix it shares with the one before. */
interface SortedTokens {
  order: Int32Array;
  lcp: Int32Array;
}

/** Tokens that leave a kind of state as it is (allowed there without a walk), and the others, sorted. */
interface Invariant {
  mask: Uint32Array;
  rest: SortedTokens;
}

/** The tokens of a vocabulary as bytes, sorted (a trie in disguise). */
export interface TokenTable {
  vocabSize: number;
  words: number;
  /** Bytes of each id that has text. */
  bytes: (Uint8Array | null)[];
  /** Every id with text. */
  all: SortedTokens;
  /** Ids with no text: special tokens, empty tokens, ids the tokenizer does not know. */
  textless: Int32Array;
  /** Free text outside a partial tag: tokens without `<`. */
  free: Invariant;
  /** Inside a string without length bounds or pattern: tokens of plain characters (no `"`, `\`, `<`, control bytes) only. */
  string: Invariant;
}

const tables = new WeakMap<HfTokenizer, Map<number, TokenTable>>();

/** The token table of a tokenizer for a model of `vocabSize` ids (built once, then cached). */
export function tokenTable(tokenizer: HfTokenizer, vocabSize: number): TokenTable {
  let byVocab = tables.get(tokenizer);
  if (!byVocab) tables.set(tokenizer, (byVocab = new Map()));
  const hit = byVocab.get(vocabSize);
  if (hit) return hit;
  const bytes: (Uint8Array | null)[] = new Array(vocabSize).fill(null);
  const textless: number[] = [];
  const withText: number[] = [];
  for (let id = 0; id < vocabSize; id++) {
    const b = tokenizer.specialTokenIds.has(id) || tokenizer.idToToken(id) === undefined ? [] : tokenizer.tokenBytes(id);
    if (b.length === 0) textless.push(id);
    else {
      bytes[id] = Uint8Array.from(b);
      withText.push(id);
    }
  }
  withText.sort((x, y) => compareBytes(bytes[x]!, bytes[y]!));
  const words = Math.ceil(vocabSize / 32);
  const invariant = (keeps: (b: Uint8Array) => boolean): Invariant => {
    const mask = new Uint32Array(words);
    const rest: number[] = [];
    for (const id of withText) {
      if (keeps(bytes[id]!)) mask[id >>> 5] |= 1 << (id & 31);
      else rest.push(id);
    }
    return { mask, rest: sorted(rest, bytes) };
  };
  const table: TokenTable = {
    vocabSize, words, bytes, all: sorted(withText, bytes), textless: Int32Array.from(textless),
    free: invariant((b) => !b.includes(0x3c)),
    string: invariant(plainString),
  };
  byVocab.set(vocabSize, table);
  return table;
}

/** Ids already in byte order, with their common prefixes. */
function sorted(ids: number[], bytes: (Uint8Array | null)[]): SortedTokens {
  const order = Int32Array.from(ids);
  const lcp = new Int32Array(order.length);
  for (let k = 1; k < order.length; k++) {
    const a = bytes[order[k - 1]]!, b = bytes[order[k]]!;
    let l = 0;
    while (l < a.length && l < b.length && a[l] === b[l]) l++;
    lcp[k] = l;
  }
  return { order, lcp };
}

/** Printable ASCII but `"`, `\` and `<`, and whole well-formed UTF-8 characters: string content that changes nothing. */
function plainString(b: Uint8Array): boolean {
  for (let i = 0; i < b.length; i++) {
    const x = b[i];
    if (x < 0x80) {
      if (x < 0x20 || x === 0x22 || x === 0x5c || x === 0x3c || x === 0x7f) return false;
      continue;
    }
    const n = x >= 0xc2 && x <= 0xdf ? 1 : x >= 0xe0 && x <= 0xef ? 2 : x >= 0xf0 && x <= 0xf4 ? 3 : -1;
    if (n < 0 || i + n >= b.length) return false; // not a lead byte, or a character the token cuts
    // Second-byte ranges of RFC 3629 (no overlong forms, surrogates or code points past U+10FFFF).
    const lo = x === 0xe0 ? 0xa0 : x === 0xf0 ? 0x90 : 0x80;
    const hi = x === 0xed ? 0x9f : x === 0xf4 ? 0x8f : 0xbf;
    if (b[i + 1] < lo || b[i + 1] > hi) return false;
    for (let k = 2; k <= n; k++) if (b[i + k] < 0x80 || b[i + k] > 0xbf) return false;
    i += n;
  }
  return true;
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

/** How the tools' schemas are enforced. */
export interface ConstrainReport {
  /** Tools whose arguments are constrained to their schema (relaxed keywords aside). */
  constrained: string[];
  /** Tools whose schema uses a feature the grammar cannot express: their arguments are any JSON object. */
  unsupported: { tool: string; reason: string }[];
  /** Keywords not enforced, per tool (the rest of the schema is). */
  relaxed: { tool: string; keywords: string[] }[];
}

/** Cap on cached allowed sets per constrainer (about 19 KB each for a 151k vocabulary). */
const CACHE_LIMIT = 4096;

/** The constraint for one set of tools on one vocabulary; makes a fresh constraint per sample. */
export class ToolCallConstrainer {
  readonly grammar: ToolCallGrammar;
  readonly report: ConstrainReport;
  private readonly cache = new Map<string, Uint32Array | null>();

  /** `grammar`: the tools (compiled here, with `opts`), or a grammar compiled already (compileJsonGrammar). */
  constructor(
    readonly table: TokenTable,
    grammar: readonly { name: string; parameters?: unknown }[] | ToolCallGrammar,
    opts: ToolCallOptions = {},
  ) {
    this.grammar = isGrammar(grammar) ? grammar : compileToolCallGrammar(grammar, opts);
    const g = this.grammar.tools;
    this.report = {
      constrained: g.filter((t) => !t.unsupported).map((t) => t.name),
      unsupported: g.filter((t) => t.unsupported).map((t) => ({ tool: t.name, reason: t.unsupported! })),
      relaxed: g.filter((t) => t.relaxed.length > 0).map((t) => ({ tool: t.name, keywords: t.relaxed })),
    };
  }

  /** A constraint starting at the beginning of an assistant turn. */
  start(): ToolCallConstraint {
    return new ConstraintRun(this);
  }

  /** The state after a token (null: the token could not come next). */
  advanceState(s: GrammarState, tokenId: number): GrammarState | null {
    const b = tokenId >= 0 && tokenId < this.table.vocabSize ? this.table.bytes[tokenId] : null;
    if (!b) return isFree(s) ? s : null;
    let x: GrammarState | null = s;
    for (let i = 0; i < b.length && x; i++) x = step(this.grammar, x, b[i]);
    return x;
  }

  /** The tokens allowed in a state: a bitset, or null when every token is. Cached by the state's key. */
  allowedIn(s: GrammarState): Uint32Array | null {
    const key = stateKey(s);
    const hit = this.cache.get(key);
    if (hit !== undefined) return hit;
    const mask = this.compute(s);
    if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
    this.cache.set(key, mask);
    return mask;
  }

  private compute(s0: GrammarState): Uint32Array | null {
    const t = this.table;
    const inv = invariantOf(s0) === 'free' ? t.free : invariantOf(s0) === 'string' ? t.string : null;
    const mask = inv ? inv.mask.slice() : new Uint32Array(t.words);
    const { order, lcp } = inv ? inv.rest : t.all;
    const set = (id: number) => {
      mask[id >>> 5] |= 1 << (id & 31);
    };
    if (isFree(s0)) for (const id of t.textless) set(id);
    // A walk of the trie of token bytes: states[d] is the state after the first d bytes of the current token.
    const states: GrammarState[] = [s0];
    let valid = 0; // bytes of the previous token walked alive
    let deadLen = Infinity; // the previous token's prefix of this length cannot come next
    for (let k = 0; k < order.length; k++) {
      const id = order[k];
      const bytes = t.bytes[id]!;
      const l = lcp[k];
      if (deadLen <= l) continue; // shares a prefix that cannot come next
      deadLen = Infinity;
      let d = Math.min(l, valid);
      for (; d < bytes.length; d++) {
        const next = step(this.grammar, states[d], bytes[d]);
        if (!next) {
          deadLen = d + 1;
          break;
        }
        states[d + 1] = next;
      }
      valid = d;
      if (d === bytes.length) set(id);
    }
    return isFull(mask, t.vocabSize) ? null : mask;
  }
}

function isGrammar(x: readonly { name: string }[] | ToolCallGrammar): x is ToolCallGrammar {
  return !Array.isArray(x);
}

/** Which tokens are known to leave this state as it is (see TokenTable). */
function invariantOf(s: GrammarState): 'free' | 'string' | null {
  const f = s.f;
  if (f.k === 'free') return (f.think ? f.c === 0 : f.a === 0 && f.b === 0) ? 'free' : null;
  if (f.k === 'str') return f.ph === 0 && f.close === 0 && f.n.min === 0 && f.n.max === Infinity && !f.n.pattern ? 'string' : null;
  return null;
}

function isFull(m: Uint32Array, vocabSize: number): boolean {
  const whole = vocabSize >>> 5;
  for (let i = 0; i < whole; i++) if (m[i] !== 0xffffffff) return false;
  const rest = vocabSize & 31;
  return rest === 0 || m[whole] === 2 ** rest - 1;
}

/** One sample's walk through the grammar. */
class ConstraintRun implements ToolCallConstraint {
  private state: GrammarState | null;
  deadEnd = false;
  constructor(private readonly constrainer: ToolCallConstrainer) {
    this.state = startState(constrainer.grammar);
  }

  allowed(): Uint32Array | null {
    if (!this.state) return null;
    const m = this.constrainer.allowedIn(this.state);
    if (m && isEmpty(m)) {
      this.deadEnd = true;
      this.state = null;
      return null;
    }
    return m;
  }

  advance(tokenId: number): void {
    if (!this.state) return;
    this.state = this.constrainer.advanceState(this.state, tokenId);
    if (!this.state) this.deadEnd = true;
  }
}

function isEmpty(m: Uint32Array): boolean {
  for (let i = 0; i < m.length; i++) if (m[i] !== 0) return false;
  return true;
}

/** The allowed set each token of a constrained turn was sampled from (null: the whole vocabulary). */
export function replayMasks(constrainer: ToolCallConstrainer, tokenIds: readonly number[]): (Uint32Array | null)[] {
  const c = constrainer.start();
  return tokenIds.map((id) => {
    const m = c.allowed();
    c.advance(id);
    return m;
  });
}
