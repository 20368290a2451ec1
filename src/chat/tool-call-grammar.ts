/**
 * The grammar of a Hermes tool call as a byte-level pushdown automaton: free text, in which
 * `<tool_call>` opens `{"name": <one of the tools>, "arguments": <an object valid for that tool's input
 * schema>}` and `</tool_call>` closes it, after which the text is free again. Constrained decoding
 * (constrain.ts) walks tokens' bytes through it to find which tokens may come next.
 *
 * Input schemas are compiled (json-schema-grammar.ts) to a small set of nodes: objects (declared properties in
 * any order, each at most once, every required one before `}`), arrays (minItems/maxItems), strings (minLength/maxLength, and `pattern`
 * through pattern-automaton.ts: the decoded characters, escapes included, walk its automaton), numbers and
 * integers (minimum/maximum, exclusive or not; no exponent, at most 15 integer and 10 fraction digits), enums
 * and consts (their JSON text), booleans, null, and unions whose alternatives start with different characters
 * (`type: [..]`, anyOf/oneOf, nullable). `$ref` to the schema's own `$defs`/`definitions` is inlined.
 * - Value keywords that need more than this (format, multipleOf, uniqueItems, …, and a pattern the automaton
 *   cannot express: lookaround, backreferences, `\b`, `\p{…}`) are relaxed: the structure is still enforced and
 *   the keyword is listed in `relaxed` (so is a pattern beside an enum, a const or no type).
 * - Structure it cannot express (allOf, not, if/then/else, patternProperties, tuples, recursive $ref, unions
 *   of alternatives starting alike) makes that tool's arguments any JSON object, listed in `unsupported`.
 * Objects with declared properties take only those (as OpenAI's strict mode and xgrammar do); an object schema
 * with no properties takes any keys. Whitespace between tokens of the JSON is free up to 16 bytes at a time.
 *
 * Two options make the call itself required: `require` (tool_choice `required` or a named function: the turn
 * opens with a call, after at most 16 bytes of whitespace) and `single` (parallel_tool_calls false: once a call
 * has closed, no other may open). A JSON grammar (`compileJsonGrammar`, for response_format) is the same
 * machinery with the whole turn one JSON value of a schema, then whitespace, then the end of the turn.
 *
 * States are immutable: a step returns a new state (or null: the byte cannot come next), so a state can be
 * kept, compared by `stateKey` and walked down many branches (the token trie) without copying.
 */

import { enc, SchemaCompiler, UnsupportedSchema, type NumBounds, type SchemaNode } from './json-schema-grammar.js';

const WS_MAX = 16;
const INT_DIGITS = 15;
const FRAC_DIGITS = 10;

const isWs = (b: number) => b === 0x20 || b === 0x0a || b === 0x09 || b === 0x0d;
const isDigit = (b: number) => b >= 0x30 && b <= 0x39;
const isHex = (b: number) => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

// ---------------------------------------------------------------------------------------------------------
// The tools

export interface CompiledTool {
  name: string;
  /** The arguments' grammar (any JSON object when the schema is unsupported). */
  args: SchemaNode;
  /** Why the schema could not be enforced, when it could not. */
  unsupported?: string;
  /** Keywords of the schema not enforced (the rest is). */
  relaxed: string[];
}

export interface ToolCallGrammar {
  tools: CompiledTool[];
  /** The `"name"` value: the JSON text of each tool's name. */
  names: SchemaNode;
  /** The turn opens with a call (tool_choice `required` or a named function). */
  require: boolean;
  /** At most one call per turn (parallel_tool_calls false). */
  single: boolean;
  /** Set for a JSON grammar: the whole turn is one value of this node (no tool calls). */
  doc?: SchemaNode;
  /** Keywords of a JSON grammar's schema not enforced. */
  relaxed?: string[];
}

/** How the calls of a turn are constrained beyond their schemas. Both default false. */
export interface ToolCallOptions {
  /** The turn must open with a call. */
  require?: boolean;
  /** No second call once one has closed. */
  single?: boolean;
}

/**
 * The grammar of a turn that is one JSON value of `schema` (response_format `json_schema`; `json_object` is
 * `{type: 'object'}`), or, with `tools`, a turn of calls as `opts` allow them (then the object comes in a later
 * turn, after their results). Throws UnsupportedSchema naming a feature it cannot
 * enforce: a response format is a promise to the caller, so it is refused rather than relaxed to any object.
 */
export function compileJsonGrammar(schema: unknown, tools: readonly { name: string; parameters?: unknown }[] = [], opts: ToolCallOptions = {}): ToolCallGrammar {
  // One id counter for the tools' nodes and the answer's: state keys tell nodes apart by id.
  const ids = { next: 1 };
  const g = compileTools(tools, opts, ids);
  const c = new SchemaCompiler((schema && typeof schema === 'object' ? schema : {}) as Record<string, unknown>, ids);
  const doc = c.compile(schema);
  if (doc.t !== 'obj') throw new UnsupportedSchema('a root that is not an object');
  return { ...g, doc, relaxed: [...c.relaxed].sort() };
}

/** Compiles each tool's input schema; never throws (an unsupported schema falls back to any object). */
export function compileToolCallGrammar(tools: readonly { name: string; parameters?: unknown }[], opts: ToolCallOptions = {}): ToolCallGrammar {
  return compileTools(tools, opts, { next: 1 });
}

function compileTools(tools: readonly { name: string; parameters?: unknown }[], opts: ToolCallOptions, ids: { next: number }): ToolCallGrammar {
  const anyObject: SchemaNode = { id: -1, t: 'obj', props: [], requiredCount: 0, extra: ANY };
  const compiled = tools.map((t): CompiledTool => {
    const schema = t.parameters ?? { type: 'object', properties: {} };
    const c = new SchemaCompiler((schema && typeof schema === 'object' ? schema : {}) as Record<string, unknown>, ids);
    try {
      const args = c.compile(schema);
      if (args.t !== 'obj') throw new UnsupportedSchema('arguments that are not an object');
      return { name: t.name, args, relaxed: [...c.relaxed].sort() };
    } catch (err) {
      if (!(err instanceof UnsupportedSchema)) throw err;
      return { name: t.name, args: anyObject, unsupported: err.message, relaxed: [] };
    }
  });
  return {
    tools: compiled, names: { id: 0, t: 'lit', values: compiled.map((t) => enc(JSON.stringify(t.name))) },
    require: opts.require === true, single: opts.single === true,
  };
}

// ---------------------------------------------------------------------------------------------------------
// States: a stack of frames, each an immutable object

type Frame =
  /** Free text; a, b, c: bytes matched of `<tool_call>`, `<think>`, `</think>`; shut: no call may open (single, one made). */
  | { k: 'free'; think: boolean; a: number; b: number; c: number; shut?: true }
  /** The start of a turn that must open with a call: ws bytes of whitespace, then p bytes of `<tool_call>`. */
  | { k: 'open'; ws: number; p: number }
  /**
   * A JSON turn: ph 0 before the value, 1 after it (ws: whitespace bytes so far). Before the value, with tools:
   * p bytes of `<tool_call>` so far; called once a call has closed.
   */
  | { k: 'doc'; ph: number; ws: number; p: number; called: boolean }
  /** The call: item i of CALL_ITEMS, p bytes into it (literal) or whitespace bytes so far; tool once named. */
  | { k: 'call'; i: number; p: number; tool: number }
  /**
   * An object. ph 0: after `{`; 1: in a declared key (kpos bytes matched, cands still possible); 2: after a key;
   * 3: after `:`; 4: after a value; 5: after `,`. seen: one character per property. cur: the key's property.
   */
  | { k: 'obj'; n: Extract<SchemaNode, { t: 'obj' }>; ph: number; ws: number; seen: string; kpos: number; cands: number[]; cur: number }
  /** An array. ph 0: after `[`; 1: after an item; 2: after `,`. */
  | { k: 'arr'; n: Extract<SchemaNode, { t: 'arr' }>; ph: number; ws: number; count: number }
  /**
   * A string after its opening quote. ph 0: characters; 1: after `\`; 2-5: hex digits of `\u` so far + 2;
   * 6: inside a UTF-8 character, `cont` continuation bytes to go, the next one in [lo, hi]. close: bytes of
   * `</tool_call>` just written, which a string may not contain (a parser would end the call there). With a
   * pattern: rx, the pattern automaton's state after the characters so far; cp, the bits of the character in
   * progress (its UTF-8 bytes or `\u` hex digits so far; 0 without a pattern, which keeps keys few).
   */
  | { k: 'str'; n: Extract<SchemaNode, { t: 'str' }>; ph: number; len: number; cont: number; lo: number; hi: number; close: number; rx: number; cp: number }
  | { k: 'num'; n: Extract<SchemaNode, { t: 'num' }>; neg: boolean; int: string; frac: string | null }
  | { k: 'lit'; n: Extract<SchemaNode, { t: 'lit' }>; pos: number; cands: number[] };

export interface GrammarState { readonly f: Frame; readonly up: GrammarState | null }

type CallItem = { ws: true } | { lit: Uint8Array } | { value: 'name' | 'args' };
const CALL_ITEMS: CallItem[] = [
  { ws: true }, { lit: enc('{') }, { ws: true }, { lit: enc('"name"') }, { ws: true }, { lit: enc(':') }, { ws: true }, { value: 'name' },
  { ws: true }, { lit: enc(',') }, { ws: true }, { lit: enc('"arguments"') }, { ws: true }, { lit: enc(':') }, { ws: true }, { value: 'args' },
  { ws: true }, { lit: enc('}') }, { ws: true }, { lit: enc('</tool_call>') },
];
const OPEN = enc('<tool_call>');
const CLOSE = enc('</tool_call>');
const THINK_OPEN = enc('<think>');
const THINK_CLOSE = enc('</think>');

/** The state at the start of an assistant turn: free text, outside any think block. */
export const FREE: GrammarState = { f: { k: 'free', think: false, a: 0, b: 0, c: 0 }, up: null };

/** The state at the start of an assistant turn under a grammar (FREE unless a call is required or it is JSON). */
export function startState(g: ToolCallGrammar): GrammarState {
  if (g.doc) return { f: { k: 'doc', ph: 0, ws: 0, p: 0, called: false }, up: null };
  return g.require ? { f: { k: 'open', ws: 0, p: 0 }, up: null } : FREE;
}

/**
 * True when the turn may end here: free text, after a JSON turn's value, or after a JSON turn's calls (stop tokens
 * and other text-less tokens may come only here).
 */
export function isFree(s: GrammarState): boolean {
  return s.f.k === 'free' || (s.f.k === 'doc' && (s.f.ph === 1 || (s.f.called && s.f.p === 0)));
}

// What a frame does with a byte.
const DEAD = null;
type Step =
  | { r: 'stay'; f: Frame }
  | { r: 'push'; f: Frame; child: Frame }
  | { r: 'done'; result: number }
  | { r: 'redo'; result: number }; // done without consuming the byte, which goes to the parent

/** Feeds one byte; null when it cannot come next. */
export function step(g: ToolCallGrammar, s: GrammarState, b: number): GrammarState | null {
  for (;;) {
    const r = stepFrame(g, s.f, b);
    if (r === DEAD) return null;
    if (r.r === 'stay') return r.f === s.f ? s : { f: r.f, up: s.up };
    if (r.r === 'push') return { f: r.child, up: { f: r.f, up: s.up } };
    const parent = s.up!;
    const f = childDone(g, parent.f, r.result);
    if (f === DEAD) return null;
    s = { f, up: parent.up };
    if (r.r === 'done') return s;
  }
}

/** Matches byte b against position p of a tag; the new position (0 when it breaks the match). */
function matchTag(tag: Uint8Array, p: number, b: number): number {
  if (tag[p] === b) return p + 1;
  return tag[0] === b ? 1 : 0;
}

function stepFrame(g: ToolCallGrammar, f: Frame, b: number): Step | null {
  switch (f.k) {
    case 'free': {
      if (f.think) {
        const c = matchTag(THINK_CLOSE, f.c, b);
        const next = c === THINK_CLOSE.length ? { k: 'free' as const, think: false, a: 0, b: 0, c: 0, ...(f.shut ? { shut: true as const } : {}) } : c === f.c && c === 0 ? f : { ...f, c };
        return { r: 'stay', f: next };
      }
      const a = matchTag(OPEN, f.a, b);
      if (a === OPEN.length) return f.shut ? DEAD : { r: 'push', f: { k: 'free', think: false, a: 0, b: 0, c: 0 }, child: { k: 'call', i: 0, p: 0, tool: -1 } };
      const tb = matchTag(THINK_OPEN, f.b, b);
      if (tb === THINK_OPEN.length) return { r: 'stay', f: { k: 'free', think: true, a: 0, b: 0, c: 0, ...(f.shut ? { shut: true as const } : {}) } };
      if (a === 0 && tb === 0 && f.a === 0 && f.b === 0) return { r: 'stay', f };
      return { r: 'stay', f: { ...f, a, b: tb } };
    }
    case 'open': {
      if (f.p === 0 && isWs(b)) return f.ws < WS_MAX ? { r: 'stay', f: { ...f, ws: f.ws + 1 } } : DEAD;
      if (OPEN[f.p] !== b) return DEAD;
      if (f.p + 1 < OPEN.length) return { r: 'stay', f: { ...f, p: f.p + 1 } };
      return { r: 'push', f: { k: 'free', think: false, a: 0, b: 0, c: 0 }, child: { k: 'call', i: 0, p: 0, tool: -1 } };
    }
    case 'doc': {
      if (f.p > 0 || (f.ph === 0 && b === OPEN[0] && g.tools.length > 0 && !(g.single && f.called))) {
        // A call before the answer: `<tool_call>` whole, then the call.
        if (OPEN[f.p] !== b) return DEAD;
        if (f.p + 1 < OPEN.length) return { r: 'stay', f: { ...f, p: f.p + 1 } };
        return { r: 'push', f: { ...f, ws: 0, p: 0, called: true }, child: { k: 'call', i: 0, p: 0, tool: -1 } };
      }
      if (isWs(b)) return f.ws < WS_MAX ? { r: 'stay', f: { ...f, ws: f.ws + 1 } } : DEAD;
      // A turn of calls ends with them: the answer comes in a later turn, after their results (so never with
      // tool_choice required).
      const child = f.ph === 0 && !f.called && !g.require ? startValue(g.doc!, b) : null;
      return child ? { r: 'push', f: { ...f, ph: 1, ws: 0 }, child } : DEAD;
    }
    case 'call': {
      const item = CALL_ITEMS[f.i];
      if ('ws' in item) {
        if (isWs(b) && f.p < WS_MAX) return { r: 'stay', f: { ...f, p: f.p + 1 } };
        return stepFrame(g, { ...f, i: f.i + 1, p: 0 }, b);
      }
      if ('lit' in item) {
        if (item.lit[f.p] !== b) return DEAD;
        if (f.p + 1 < item.lit.length) return { r: 'stay', f: { ...f, p: f.p + 1 } };
        if (f.i + 1 === CALL_ITEMS.length) return { r: 'done', result: -1 };
        return { r: 'stay', f: { ...f, i: f.i + 1, p: 0 } };
      }
      const node = item.value === 'name' ? g.names : g.tools[f.tool].args;
      const child = startValue(node, b);
      return child ? { r: 'push', f, child } : DEAD;
    }
    case 'obj':
      return stepObj(f, b);
    case 'arr': {
      const n = f.n;
      if (f.ph !== 2 || f.count === 0) {
        // After `[` or an item: `]` once there are enough items.
        if (b === 0x5d && f.count >= n.min) return { r: 'done', result: -1 };
      }
      if (isWs(b)) return f.ws < WS_MAX ? { r: 'stay', f: { ...f, ws: f.ws + 1 } } : DEAD;
      if (f.ph === 1) return b === 0x2c && f.count < n.max ? { r: 'stay', f: { ...f, ph: 2, ws: 0 } } : DEAD;
      if (f.count >= n.max) return DEAD;
      const child = startValue(n.items, b);
      return child ? { r: 'push', f: { ...f, ws: 0 }, child } : DEAD;
    }
    case 'str':
      return stepStr(f, b);
    case 'num':
      return stepNum(f, b);
    case 'lit': {
      const next = f.cands.filter((i) => f.n.values[i].length > f.pos && f.n.values[i][f.pos] === b);
      if (next.length > 0) return { r: 'stay', f: { ...f, pos: f.pos + 1, cands: next } };
      const whole = f.cands.find((i) => f.n.values[i].length === f.pos);
      return whole !== undefined ? { r: 'redo', result: whole } : DEAD;
    }
  }
}

/** The frame of a value of `node` whose first byte is b, or null when no value of it starts with b. */
function startValue(node: SchemaNode, b: number): Frame | null {
  switch (node.t) {
    case 'union': {
      for (const a of node.alts) {
        const f = startValue(a, b);
        if (f) return f;
      }
      return null;
    }
    case 'any':
      return startValue(ANY_UNION, b);
    case 'obj':
      return b === 0x7b ? { k: 'obj', n: node, ph: 0, ws: 0, seen: '0'.repeat(node.props.length), kpos: 0, cands: [], cur: -1 } : null;
    case 'arr':
      return b === 0x5b ? { k: 'arr', n: node, ph: 0, ws: 0, count: 0 } : null;
    case 'str':
      return b === 0x22 ? { k: 'str', n: node, ph: 0, len: 0, cont: 0, lo: 0, hi: 0, close: 0, rx: node.pattern ? node.pattern.start : -1, cp: 0 } : null;
    case 'num': {
      const f: Frame = { k: 'num', n: node, neg: false, int: '', frac: null };
      if (b === 0x2d) return viable({ ...f, neg: true }) ? { ...f, neg: true } : null;
      if (!isDigit(b)) return null;
      const g = { ...f, int: String.fromCharCode(b) };
      return viable(g) ? g : null;
    }
    case 'lit': {
      const cands = node.values.flatMap((v, i) => (v[0] === b ? [i] : []));
      return cands.length ? { k: 'lit', n: node, pos: 1, cands } : null;
    }
  }
}

const ANY: SchemaNode = { id: -2, t: 'any' };
const ANY_UNION: SchemaNode = {
  id: -3,
  t: 'union',
  alts: [
    { id: -4, t: 'obj', props: [], requiredCount: 0, extra: ANY },
    { id: -5, t: 'arr', items: ANY, min: 0, max: Infinity },
    { id: -6, t: 'str', min: 0, max: Infinity },
    { id: -7, t: 'num', int: false, lo: -Infinity, loEx: false, hi: Infinity, hiEx: false },
    { id: -8, t: 'lit', values: [enc('true'), enc('false'), enc('null')] },
  ],
};

/** A child value finished: the parent moves on. */
function childDone(g: ToolCallGrammar, f: Frame, result: number): Frame | null {
  switch (f.k) {
    case 'free':
      return { k: 'free', think: false, a: 0, b: 0, c: 0, ...(g.single ? { shut: true as const } : {}) };
    case 'doc':
      return f;
    case 'call': {
      // The name's literal reports which tool it named; the arguments follow that tool's schema.
      const item = CALL_ITEMS[f.i];
      return { ...f, i: f.i + 1, p: 0, tool: 'value' in item && item.value === 'name' ? result : f.tool };
    }
    case 'obj':
      // A free key (string child) ends in phase 1; a value ends in phase 3.
      return f.ph === 1 ? { ...f, ph: 2, ws: 0 } : { ...f, ph: 4, ws: 0 };
    case 'arr':
      return { ...f, ph: 1, ws: 0, count: f.count + 1 };
    default:
      return null;
  }
}

function stepObj(f: Extract<Frame, { k: 'obj' }>, b: number): Step | null {
  const n = f.n;
  const ws = () => (f.ws < WS_MAX ? { r: 'stay' as const, f: { ...f, ws: f.ws + 1 } } : DEAD);
  const unseen = () => n.props.flatMap((_, i) => (f.seen[i] === '0' ? [i] : []));
  const requiredDone = () => n.props.every((p, i) => !p.required || f.seen[i] === '1');
  const startKey = (): Step | null => {
    if (n.extra) return { r: 'push', f: { ...f, ph: 1, ws: 0 }, child: { k: 'str', n: FREE_STRING, ph: 0, len: 0, cont: 0, lo: 0, hi: 0, close: 0, rx: -1, cp: 0 } };
    const cands = unseen();
    return cands.length ? { r: 'stay', f: { ...f, ph: 1, ws: 0, kpos: 1, cands } } : DEAD;
  };
  switch (f.ph) {
    case 0:
      if (isWs(b)) return ws();
      if (b === 0x7d) return requiredDone() ? { r: 'done', result: -1 } : DEAD;
      return b === 0x22 ? startKey() : DEAD;
    case 1: {
      const cands = f.cands.filter((i) => n.props[i].enc[f.kpos] === b);
      if (cands.length === 0) return DEAD;
      const whole = cands.find((i) => n.props[i].enc.length === f.kpos + 1);
      if (whole !== undefined) return { r: 'stay', f: { ...f, ph: 2, ws: 0, kpos: 0, cands: [], cur: whole } };
      return { r: 'stay', f: { ...f, kpos: f.kpos + 1, cands } };
    }
    case 2:
      if (isWs(b)) return ws();
      return b === 0x3a ? { r: 'stay', f: { ...f, ph: 3, ws: 0 } } : DEAD;
    case 3: {
      if (isWs(b)) return ws();
      const node = f.cur >= 0 ? n.props[f.cur].node : n.extra!;
      const child = startValue(node, b);
      if (!child) return DEAD;
      const seen = f.cur >= 0 ? f.seen.slice(0, f.cur) + '1' + f.seen.slice(f.cur + 1) : f.seen;
      return { r: 'push', f: { ...f, seen, cur: -1, ws: 0 }, child };
    }
    case 4:
      if (isWs(b)) return ws();
      if (b === 0x7d) return requiredDone() ? { r: 'done', result: -1 } : DEAD;
      if (b !== 0x2c) return DEAD;
      return n.extra || unseen().length > 0 ? { r: 'stay', f: { ...f, ph: 5, ws: 0 } } : DEAD;
    default: // 5
      if (isWs(b)) return ws();
      return b === 0x22 ? startKey() : DEAD;
  }
}

const FREE_STRING: Extract<SchemaNode, { t: 'str' }> = { id: -9, t: 'str', min: 0, max: Infinity };

function stepStr(f: Extract<Frame, { k: 'str' }>, b: number): Step | null {
  const close = matchTag(CLOSE, f.close, b);
  if (close === CLOSE.length) return DEAD;
  return stepStrChar(close === f.close ? f : { ...f, close }, b);
}

function stepStrChar(f: Extract<Frame, { k: 'str' }>, b: number): Step | null {
  const n = f.n;
  const counted = n.min > 0 || n.max < Infinity;
  const rx = n.pattern;
  // Characters written once the one in progress counts (the pattern automaton's bounds see the same count).
  const next = counted ? f.len + 1 : 0;
  /** Character c is complete (an ASCII byte or an escape): it counts, and the pattern must stay live. */
  const char = (c: number): Step | null => {
    if (counted && f.len >= n.max) return DEAD;
    if (rx) {
      const s = rx.step(f.rx, c);
      return rx.live(s, next) ? { r: 'stay', f: { ...f, ph: 0, len: next, rx: s, cp: 0 } } : DEAD;
    }
    return { r: 'stay', f: counted || f.ph !== 0 ? { ...f, ph: 0, len: next } : f };
  };
  /** The character in progress lies in [lo, hi]: some character there must keep the pattern live. */
  const possible = (lo: number, hi: number, len: number) => !rx || rx.liveAfter(f.rx, lo, hi, len);
  if (f.ph === 6) {
    // Well-formed UTF-8 only (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF), so that the
    // characters counted here are the ones a decoder sees.
    if (b < f.lo || b > f.hi) return DEAD;
    if (!rx) return { r: 'stay', f: f.cont > 1 ? { ...f, cont: f.cont - 1, lo: 0x80, hi: 0xbf } : { ...f, ph: 0, cont: 0, lo: 0, hi: 0 } };
    const cp = (f.cp << 6) | (b & 0x3f);
    if (f.cont > 1) {
      const rest = 6 * (f.cont - 1);
      return possible(cp << rest, ((cp + 1) << rest) - 1, f.len) ? { r: 'stay', f: { ...f, cont: f.cont - 1, lo: 0x80, hi: 0xbf, cp } } : DEAD;
    }
    const s = rx.step(f.rx, cp);
    return rx.live(s, f.len) ? { r: 'stay', f: { ...f, ph: 0, cont: 0, lo: 0, hi: 0, rx: s, cp: 0 } } : DEAD;
  }
  if (f.ph === 0) {
    if (b === 0x22) return f.len >= n.min && (!rx || rx.accepts(f.rx)) ? { r: 'done', result: -1 } : DEAD;
    // An escape can stand for any character of the BMP (`\uXXXX`), the short ones included.
    if (b === 0x5c) return (counted && f.len >= n.max) || !possible(0, 0xffff, next) ? DEAD : { r: 'stay', f: { ...f, ph: 1 } };
    if (b < 0x20) return DEAD;
    if (b < 0x80) return char(b);
    const lead = utf8Lead(b);
    if (!lead) return DEAD;
    if (counted && f.len >= n.max) return DEAD;
    const [cont, lo, hi] = lead;
    if (!rx) return { r: 'stay', f: { ...f, ph: 6, len: next, cont, lo, hi } };
    // The code points this lead byte and the allowed range of the next byte can still make.
    const bits = b & (0x7f >> (cont + 1));
    const rest = 6 * (cont - 1);
    if (!possible(((bits << 6) | (lo & 0x3f)) << rest, ((((bits << 6) | (hi & 0x3f)) + 1) << rest) - 1, next)) return DEAD;
    return { r: 'stay', f: { ...f, ph: 6, len: next, cont, lo, hi, cp: bits } };
  }
  if (f.ph === 1) {
    if (b === 0x75) return { r: 'stay', f: { ...f, ph: 2 } };
    const short = ESCAPES.get(b);
    return short !== undefined ? char(short) : DEAD;
  }
  // ph 2-5: the hex digits of `\u`, ph - 2 of them so far.
  if (!isHex(b)) return DEAD;
  if (!rx) return f.ph < 5 ? { r: 'stay', f: { ...f, ph: f.ph + 1 } } : char(0);
  const cp = f.cp * 16 + parseInt(String.fromCharCode(b), 16);
  if (f.ph === 5) return char(cp);
  const rest = 4 * (5 - f.ph);
  return possible(cp << rest, ((cp + 1) << rest) - 1, next) ? { r: 'stay', f: { ...f, ph: f.ph + 1, cp } } : DEAD;
}

/** JSON's short escapes: the byte after `\` and the character it stands for. */
const ESCAPES = new Map([..."\"\\/bfnrt"].map((c, i) => [c.charCodeAt(0), [0x22, 0x5c, 0x2f, 0x08, 0x0c, 0x0a, 0x0d, 0x09][i]]));

/** For a UTF-8 lead byte: [continuation bytes, range of the first of them], or null when b cannot lead. */
function utf8Lead(b: number): [number, number, number] | null {
  if (b >= 0xc2 && b <= 0xdf) return [1, 0x80, 0xbf];
  if (b === 0xe0) return [2, 0xa0, 0xbf];
  if (b === 0xed) return [2, 0x80, 0x9f];
  if (b >= 0xe1 && b <= 0xef) return [2, 0x80, 0xbf];
  if (b === 0xf0) return [3, 0x90, 0xbf];
  if (b >= 0xf1 && b <= 0xf3) return [3, 0x80, 0xbf];
  if (b === 0xf4) return [3, 0x80, 0x8f];
  return null;
}

function stepNum(f: Extract<Frame, { k: 'num' }>, b: number): Step | null {
  if (isDigit(b)) {
    let g: Extract<Frame, { k: 'num' }>;
    if (f.frac === null) {
      if (f.int === '0' || f.int.length >= INT_DIGITS) return DEAD;
      g = { ...f, int: f.int + String.fromCharCode(b) };
    } else {
      if (f.frac.length >= FRAC_DIGITS) return DEAD;
      g = { ...f, frac: f.frac + String.fromCharCode(b) };
    }
    return viable(g) ? { r: 'stay', f: g } : DEAD;
  }
  if (b === 0x2e) {
    if (f.n.int || f.frac !== null || f.int === '') return DEAD;
    const g = { ...f, frac: '' };
    return viable(g) ? { r: 'stay', f: g } : DEAD;
  }
  // Anything else ends the number, if it is a whole number in range; the byte then belongs to the parent.
  if (f.int === '' || f.frac === '') return DEAD;
  const v = Number(`${f.neg ? '-' : ''}${f.int}${f.frac !== null ? '.' + f.frac : ''}`);
  return inRange(f.n, v, true, v, true) ? { r: 'redo', result: -1 } : DEAD;
}

/** Whether [a, b] (ends closed or open as flagged) meets the node's range. */
function inRange(n: NumBounds, a: number, aIn: boolean, b: number, bIn: boolean): boolean {
  // The intersection's lower end is the larger of a and lo, its upper end the smaller of b and hi.
  let lo = a, loIn = aIn;
  if (n.lo > lo || (n.lo === lo && n.loEx)) { lo = n.lo; loIn = !n.loEx; }
  let hi = b, hiIn = bIn;
  if (n.hi < hi || (n.hi === hi && n.hiEx)) { hi = n.hi; hiIn = !n.hiEx; }
  return lo < hi || (lo === hi && loIn && hiIn);
}

/** Whether some number in range starts with this prefix (the bounds make some prefixes dead ends). */
function viable(f: Extract<Frame, { k: 'num' }>): boolean {
  const n = f.n;
  if (n.lo === -Infinity && n.hi === Infinity) return true;
  const sign = f.neg ? -1 : 1;
  // Reachable magnitudes as closed-open intervals [a, b) (or single integers), then signed.
  const spans: [number, number, boolean][] = []; // [a, b, b included]
  if (f.int === '') {
    spans.push([0, 10 ** INT_DIGITS, false]);
  } else if (f.frac !== null) {
    const m = Number(`${f.int}.${f.frac || '0'}`);
    spans.push([m, m + 10 ** -f.frac.length, false]);
  } else if (f.int === '0') {
    spans.push(n.int ? [0, 0, true] : [0, 1, false]);
  } else {
    const v = Number(f.int);
    for (let j = 0; f.int.length + j <= INT_DIGITS; j++) {
      const a = v * 10 ** j;
      spans.push(n.int ? [a, a + 10 ** j - 1, true] : [a, (v + 1) * 10 ** j, false]);
    }
  }
  return spans.some(([a, b, bIn]) => (sign > 0 ? inRange(n, a, true, b, bIn) : inRange(n, -b, bIn, -a, true)));
}

// ---------------------------------------------------------------------------------------------------------
// Keys: two states with the same key accept the same continuations (used to cache token masks).

function frameKey(f: Frame): string {
  switch (f.k) {
    case 'free': return `F${f.think ? 1 : 0}.${f.a}.${f.b}.${f.c}${f.shut ? 'x' : ''}`;
    case 'open': return `P${f.ws}.${f.p}`;
    case 'doc': return `D${f.ph}.${f.ws}.${f.p}.${f.called ? 1 : 0}`;
    case 'call': return `C${f.i}.${f.p}.${f.tool}`;
    case 'obj': return `O${f.n.id}.${f.ph}.${f.ws}.${f.seen}.${f.kpos}.${f.cands.join(',')}.${f.cur}`;
    case 'arr': return `A${f.n.id}.${f.ph}.${f.ws}.${f.count}`;
    case 'str': return `S${f.n.id}.${f.ph}.${f.len}.${f.cont}.${f.lo}.${f.hi}.${f.close}.${f.rx}.${f.cp}`;
    case 'num': return `N${f.n.id}.${f.neg ? '-' : ''}${f.int}${f.frac !== null ? '.' + f.frac : ''}`;
    case 'lit': return `L${f.n.id}.${f.pos}.${f.cands.join(',')}`;
  }
}

export function stateKey(s: GrammarState): string {
  let key = '';
  for (let x: GrammarState | null = s; x; x = x.up) key += frameKey(x.f) + '|';
  return key;
}
