/**
 * A JSON Schema `pattern` as an automaton over a string's characters, for constrained decoding
 * (tool-call-grammar.ts walks a string's decoded characters through it).
 *
 * The pattern is ECMA-262 syntax read as Ajv reads it (the `u` flag: characters are code points). Supported:
 * literals, `.`, classes `[...]` with ranges and negation, `\d \w \s \D \W \S`, character escapes (`\n`, `\x41`,
 * `\u0041`, `\u{41}`, `\cA`, `\0`, escaped metacharacters), groups `(...)`, `(?:...)`, `(?<name>...)`,
 * alternation, the quantifiers `* + ? {n} {n,} {n,m}` (lazy forms too: a test of the whole string does not
 * depend on which match a quantifier prefers), and the assertions `^` and `$` anywhere (without the `m` flag
 * they hold only at the string's start and end). Everything else — backreferences, lookaround, `\b`, `\B`,
 * `\p{…}` — throws UnsupportedPattern, and the caller leaves the keyword relaxed.
 *
 * JSON Schema patterns are not anchored: the automaton is a Thompson NFA of `[^]*(?:pattern)[^]*`, run as a DFA
 * built lazily (each DFA state is a set of the NFA's character nodes plus "the string may end here"). Strings
 * take characters of the Basic Multilingual Plane only (no surrogates), where the pattern means the same with
 * and without the `u` flag — a server validating with either reads the string alike.
 *
 * Decoding must never paint itself into a corner, so every state kept is live: some continuation reaches
 * acceptance within the string's length bounds. For each NFA character node the lengths of its accepted
 * continuations are precomputed up to K = min(maxLength, minLength + #nodes) (a longer one can be pumped down
 * into that window); nodes with none are pruned, and a state is live when a length fits the bounds left.
 */

/** A pattern the automaton cannot enforce (the keyword stays relaxed), or that is not a valid pattern. */
export class UnsupportedPattern extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnsupportedPattern';
  }
}

/** Characters a pattern-constrained string can hold: the BMP without surrogates. */
const ALPHABET: CharSet = [0, 0xd7ff, 0xe000, 0xffff];
const MAX_CP = 0x10ffff;
const MAX_NODES = 4000;
/** Bound on the length table's work (#nodes × K × closure sizes): larger patterns stay relaxed. */
const MAX_TABLE_WORK = 20_000_000;

// ---------------------------------------------------------------------------------------------------------
// Character sets: sorted, disjoint, inclusive ranges [lo0, hi0, lo1, hi1, …]

type CharSet = number[];

function normalize(ranges: [number, number][]): CharSet {
  ranges.sort((a, b) => a[0] - b[0]);
  const out: CharSet = [];
  for (const [lo, hi] of ranges) {
    if (lo > hi) continue;
    const n = out.length;
    if (n > 0 && lo <= out[n - 1] + 1) out[n - 1] = Math.max(out[n - 1], hi);
    else out.push(lo, hi);
  }
  return out;
}

const pairs = (s: CharSet): [number, number][] => Array.from({ length: s.length / 2 }, (_, i) => [s[2 * i], s[2 * i + 1]]);
const union = (...sets: CharSet[]): CharSet => normalize(sets.flatMap(pairs));

function negate(s: CharSet): CharSet {
  const out: [number, number][] = [];
  let next = 0;
  for (const [lo, hi] of pairs(s)) {
    out.push([next, lo - 1]);
    next = hi + 1;
  }
  out.push([next, MAX_CP]);
  return normalize(out);
}

function intersect(a: CharSet, b: CharSet): CharSet {
  const out: [number, number][] = [];
  for (const [alo, ahi] of pairs(a)) for (const [blo, bhi] of pairs(b)) out.push([Math.max(alo, blo), Math.min(ahi, bhi)]);
  return normalize(out);
}

function contains(s: CharSet, c: number): boolean {
  let lo = 0, hi = s.length / 2 - 1;
  while (lo <= hi) {
    const m = (lo + hi) >> 1;
    if (c < s[2 * m]) hi = m - 1;
    else if (c > s[2 * m + 1]) lo = m + 1;
    else return true;
  }
  return false;
}

const single = (c: number): CharSet => [c, c];
const DIGIT: CharSet = [0x30, 0x39];
const WORD: CharSet = normalize([[0x30, 0x39], [0x41, 0x5a], [0x5f, 0x5f], [0x61, 0x7a]]);
// WhiteSpace and LineTerminator of ECMA-262 (what `\s` matches).
const SPACE: CharSet = normalize([[0x09, 0x0d], [0x20, 0x20], [0xa0, 0xa0], [0x1680, 0x1680], [0x2000, 0x200a], [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f], [0x3000, 0x3000], [0xfeff, 0xfeff]]);
const LINE_TERMINATORS: CharSet = normalize([[0x0a, 0x0a], [0x0d, 0x0d], [0x2028, 0x2029]]);
const DOT = negate(LINE_TERMINATORS);

// ---------------------------------------------------------------------------------------------------------
// Parsing (the u-flag grammar, less what is unsupported)

type Ast =
  | { t: 'set'; set: CharSet }
  | { t: 'seq'; items: Ast[] }
  | { t: 'alt'; alts: Ast[] }
  | { t: 'rep'; node: Ast; min: number; max: number }
  | { t: 'bol' }
  | { t: 'eol' };

const SYNTAX = new Set('^$\\.*+?()[]{}|/'.split('').map((c) => c.codePointAt(0)!));
const cp = (s: string) => s.codePointAt(0)!;

class Parser {
  private readonly cps: number[];
  private pos = 0;
  constructor(source: string) {
    this.cps = Array.from(source, (c) => c.codePointAt(0)!);
  }

  parse(): Ast {
    const ast = this.disjunction();
    if (this.pos < this.cps.length) throw this.fail('an unmatched `)`');
    return ast;
  }

  private peek(k = 0): number | undefined {
    return this.cps[this.pos + k];
  }

  private eat(c: string): boolean {
    if (this.peek() !== cp(c)) return false;
    this.pos++;
    return true;
  }

  private fail(what: string): UnsupportedPattern {
    return new UnsupportedPattern(`${what} at offset ${this.pos}`);
  }

  private disjunction(): Ast {
    const alts = [this.alternative()];
    while (this.eat('|')) alts.push(this.alternative());
    return alts.length === 1 ? alts[0] : { t: 'alt', alts };
  }

  private alternative(): Ast {
    const items: Ast[] = [];
    while (this.pos < this.cps.length && this.peek() !== cp('|') && this.peek() !== cp(')')) items.push(this.term());
    return items.length === 1 ? items[0] : { t: 'seq', items };
  }

  private term(): Ast {
    if (this.eat('^')) return { t: 'bol' };
    if (this.eat('$')) return { t: 'eol' };
    const atom = this.atom();
    return this.quantified(atom);
  }

  private quantified(node: Ast): Ast {
    let min: number, max: number;
    const c = this.peek();
    if (c === cp('*')) [min, max] = [0, Infinity];
    else if (c === cp('+')) [min, max] = [1, Infinity];
    else if (c === cp('?')) [min, max] = [0, 1];
    else if (c === cp('{')) {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(String.fromCodePoint(...this.cps.slice(this.pos, this.pos + 24)));
      if (!m) throw this.fail('a `{` that is not a quantifier');
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === '' ? Infinity : Number(m[3]);
      if (min > max) throw this.fail('a quantifier {n,m} with n > m');
      this.pos += m[0].length - 1;
    } else return node;
    this.pos++;
    this.eat('?'); // lazy: the same strings match
    return { t: 'rep', node, min, max };
  }

  private atom(): Ast {
    const c = this.peek()!;
    this.pos++;
    if (c === cp('.')) return { t: 'set', set: DOT };
    if (c === cp('[')) return { t: 'set', set: this.cls() };
    if (c === cp('(')) {
      if (this.eat('?')) {
        if (this.eat(':')) {
          // a non-capturing group
        } else if (this.peek() === cp('<') && this.peek(1) !== cp('=') && this.peek(1) !== cp('!')) {
          this.pos++;
          while (this.peek() !== undefined && this.peek() !== cp('>')) this.pos++;
          if (!this.eat('>')) throw this.fail('an unterminated group name');
        } else throw this.fail('lookaround or a group modifier');
      }
      const inner = this.disjunction();
      if (!this.eat(')')) throw this.fail('an unterminated group');
      return inner;
    }
    if (c === cp('\\')) return this.atomEscape();
    if (SYNTAX.has(c) && c !== cp('/')) throw this.fail(`a stray ${String.fromCodePoint(c)}`);
    return { t: 'set', set: single(c) };
  }

  private atomEscape(): Ast {
    const cls = this.classEscape();
    if (cls) return { t: 'set', set: cls };
    const c = this.peek();
    if (c === cp('b') || c === cp('B')) throw this.fail('a word boundary assertion');
    if (c !== undefined && c >= cp('1') && c <= cp('9')) throw this.fail('a backreference');
    if (c === cp('k')) throw this.fail('a named backreference');
    return { t: 'set', set: single(this.characterEscape(false)) };
  }

  /** `\d \D \s \S \w \W` (after the backslash), or null. */
  private classEscape(): CharSet | null {
    const c = this.peek();
    const sets: Record<number, CharSet> = { [cp('d')]: DIGIT, [cp('D')]: negate(DIGIT), [cp('s')]: SPACE, [cp('S')]: negate(SPACE), [cp('w')]: WORD, [cp('W')]: negate(WORD) };
    if (c !== undefined && sets[c]) {
      this.pos++;
      return sets[c];
    }
    if (c === cp('p') || c === cp('P')) throw this.fail('a unicode property escape');
    return null;
  }

  /** One character after a backslash. */
  private characterEscape(inClass: boolean): number {
    const c = this.peek();
    if (c === undefined) throw this.fail('a trailing backslash');
    this.pos++;
    const controls: Record<number, number> = { [cp('f')]: 0x0c, [cp('n')]: 0x0a, [cp('r')]: 0x0d, [cp('t')]: 0x09, [cp('v')]: 0x0b };
    if (controls[c] !== undefined) return controls[c];
    if (c === cp('c')) {
      const l = this.peek();
      if (l === undefined || !/[A-Za-z]/.test(String.fromCodePoint(l))) throw this.fail('`\\c` without a letter');
      this.pos++;
      return l % 32;
    }
    if (c === cp('0')) {
      const d = this.peek();
      if (d !== undefined && d >= cp('0') && d <= cp('9')) throw this.fail('an octal escape');
      return 0;
    }
    if (c === cp('x')) return this.hex(2);
    if (c === cp('u')) {
      if (this.eat('{')) {
        const start = this.pos;
        while (this.peek() !== undefined && this.peek() !== cp('}')) this.pos++;
        const v = parseInt(String.fromCodePoint(...this.cps.slice(start, this.pos)), 16);
        if (!this.eat('}') || !(v <= MAX_CP)) throw this.fail('a bad `\\u{…}` escape');
        return v;
      }
      const hi = this.hex(4);
      // A surrogate pair written as two escapes is one code point under the u flag.
      if (hi >= 0xd800 && hi <= 0xdbff && this.peek() === cp('\\') && this.peek(1) === cp('u')) {
        const save = this.pos;
        this.pos += 2;
        const lo = this.hex(4);
        if (lo >= 0xdc00 && lo <= 0xdfff) return 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
        this.pos = save;
      }
      return hi;
    }
    if (SYNTAX.has(c) || (inClass && c === cp('-'))) return c;
    if (inClass && c === cp('b')) return 0x08;
    throw this.fail(`the escape \\${String.fromCodePoint(c)}`);
  }

  private hex(digits: number): number {
    const s = String.fromCodePoint(...this.cps.slice(this.pos, this.pos + digits));
    if (!new RegExp(`^[0-9a-fA-F]{${digits}}$`).test(s)) throw this.fail('a bad hex escape');
    this.pos += digits;
    return parseInt(s, 16);
  }

  /** A class after its `[`. */
  private cls(): CharSet {
    const negated = this.eat('^');
    const parts: CharSet[] = [];
    while (!this.eat(']')) {
      if (this.peek() === undefined) throw this.fail('an unterminated class');
      const a = this.classAtom();
      if (this.peek() === cp('-') && this.peek(1) !== cp(']') && this.peek(1) !== undefined) {
        this.pos++;
        const b = this.classAtom();
        if (typeof a !== 'number' || typeof b !== 'number') throw this.fail('a class range with a class escape at an end');
        if (a > b) throw this.fail('a class range out of order');
        parts.push([a, b]);
      } else parts.push(typeof a === 'number' ? single(a) : a);
    }
    const set = union(...parts);
    return negated ? negate(set) : set;
  }

  private classAtom(): number | CharSet {
    const c = this.peek()!;
    this.pos++;
    if (c !== cp('\\')) return c;
    return this.classEscape() ?? this.characterEscape(true);
  }
}

// ---------------------------------------------------------------------------------------------------------
// The NFA

type NfaNode =
  | { k: 'char'; set: CharSet; next: number }
  | { k: 'split'; a: number; b: number }
  | { k: 'bol'; next: number }
  | { k: 'eol'; next: number }
  | { k: 'final' };

class NfaBuilder {
  readonly nodes: NfaNode[] = [];

  add(n: NfaNode): number {
    if (this.nodes.length >= MAX_NODES) throw new UnsupportedPattern(`more than ${MAX_NODES} automaton nodes`);
    this.nodes.push(n);
    return this.nodes.length - 1;
  }

  /** Emits ast so that it continues at `next`; returns its start (continuation-passing, right to left). */
  emit(ast: Ast, next: number): number {
    switch (ast.t) {
      case 'set':
        return this.add({ k: 'char', set: intersect(ast.set, ALPHABET), next });
      case 'seq':
        return ast.items.reduceRight((cont, item) => this.emit(item, cont), next);
      case 'alt': {
        const starts = ast.alts.map((a) => this.emit(a, next));
        return starts.reduceRight((rest, s) => this.add({ k: 'split', a: s, b: rest }));
      }
      case 'bol':
        return this.add({ k: 'bol', next });
      case 'eol':
        return this.add({ k: 'eol', next });
      case 'rep': {
        let tail = next;
        if (ast.max === Infinity) {
          const loop = this.add({ k: 'split', a: -1, b: next });
          (this.nodes[loop] as { a: number }).a = this.emit(ast.node, loop);
          tail = loop;
        } else {
          // x{n,m}: n copies, then (x(x(…)?)?)? nested m − n deep.
          for (let i = 0; i < ast.max - ast.min; i++) tail = this.add({ k: 'split', a: this.emit(ast.node, tail), b: next });
        }
        for (let i = 0; i < ast.min; i++) tail = this.emit(ast.node, tail);
        return tail;
      }
    }
  }
}

/** Character nodes reached from some nodes by ε-moves, and whether the string may end there. */
interface Closure { chars: number[]; endOk: boolean }

function closure(nodes: NfaNode[], from: number[], atStart: boolean): Closure {
  // After `$` only ε-moves to the end may follow: a character there can never be consumed.
  const seen = new Set<number>();
  const stack: [number, boolean][] = from.map((n) => [n, false]);
  const chars = new Set<number>();
  let endOk = false;
  while (stack.length) {
    const [i, afterEol] = stack.pop()!;
    const key = 2 * i + (afterEol ? 1 : 0);
    if (seen.has(key)) continue;
    seen.add(key);
    const n = nodes[i];
    switch (n.k) {
      case 'char': if (!afterEol) chars.add(i); break;
      case 'split': stack.push([n.a, afterEol], [n.b, afterEol]); break;
      case 'bol': if (atStart) stack.push([n.next, afterEol]); break;
      case 'eol': stack.push([n.next, true]); break;
      case 'final': endOk = true; break;
    }
  }
  return { chars: [...chars].sort((a, b) => a - b), endOk };
}

// ---------------------------------------------------------------------------------------------------------
// The lazy DFA

interface DfaState {
  chars: Int32Array;
  endOk: boolean;
  /** acc[j]: some continuation of exactly j characters is accepted (j ≤ K). */
  acc: Uint8Array;
  next: Map<number, number>;
  after: Map<string, Uint8Array>;
}

/** The automaton of one pattern under one pair of length bounds (`len` below counts characters written). */
export class PatternAutomaton {
  /** The state before the first character (-1 when the pattern matches nothing within the bounds). */
  readonly start: number;
  private readonly nodes: NfaNode[];
  private readonly reach: Closure[] = [];
  private readonly lengths: Uint8Array[] = [];
  private readonly K: number;
  private readonly matched: number;
  private readonly states: DfaState[] = [];
  private readonly ids = new Map<string, number>();

  constructor(
    readonly source: string,
    private readonly minLength: number,
    private readonly maxLength: number,
  ) {
    try {
      new RegExp(source, 'u');
    } catch (err) {
      throw new UnsupportedPattern(`not an ECMA-262 pattern under the u flag (${(err as Error).message})`);
    }
    const ast = new Parser(source).parse();
    const b = new NfaBuilder();
    // Unanchored both ways: [^]*(?:pattern)[^]*. The suffix loop, once reached, accepts every continuation.
    const final = b.add({ k: 'final' });
    const suffix = b.add({ k: 'split', a: -1, b: final });
    this.matched = b.add({ k: 'char', set: ALPHABET, next: suffix });
    (b.nodes[suffix] as { a: number }).a = this.matched;
    const body = b.emit(ast, suffix);
    const prefix = b.add({ k: 'split', a: -1, b: body });
    (b.nodes[prefix] as { a: number }).a = b.add({ k: 'char', set: ALPHABET, next: prefix });
    this.nodes = b.nodes;

    // Where each character node leads, then which continuation lengths each accepts (a layer per length).
    const charNodes = this.nodes.flatMap((n, i) => (n.k === 'char' ? [i] : []));
    for (const i of charNodes) this.reach[i] = closure(this.nodes, [(this.nodes[i] as { next: number }).next], false);
    const nc = charNodes.length;
    this.K = Math.min(maxLength, minLength + nc);
    const work = (this.K + 1) * charNodes.reduce((s, i) => s + this.reach[i].chars.length + 1, 0);
    if (work > MAX_TABLE_WORK) throw new UnsupportedPattern('a pattern too large for its length bounds');
    for (const i of charNodes) this.lengths[i] = new Uint8Array(this.K + 1);
    // A node whose set is empty (`[]`, or only characters outside the alphabet) consumes nothing: it stays dead.
    const consuming = charNodes.filter((i) => (this.nodes[i] as { set: CharSet }).set.length > 0);
    for (let j = 1; j <= this.K; j++) {
      for (const i of consuming) {
        const r = this.reach[i];
        this.lengths[i][j] = (j === 1 ? r.endOk : r.chars.some((q) => this.lengths[q][j - 1] === 1)) ? 1 : 0;
      }
    }
    // Prune the nodes from which nothing is accepted (the prefix loop of an anchored pattern, say).
    const live = (i: number) => this.lengths[i].includes(1);
    for (const i of charNodes) this.reach[i] = { chars: this.reach[i].chars.filter(live), endOk: this.reach[i].endOk };
    const first = closure(this.nodes, [prefix], true);
    this.start = this.intern(first.chars.filter(live), first.endOk);
  }

  /** Whether the string may end in this state (its pattern matched). */
  accepts(s: number): boolean {
    return s >= 0 && this.states[s].endOk;
  }

  /** The state after character c, or -1 when nothing accepted starts so. */
  step(s: number, c: number): number {
    if (s < 0) return -1;
    const st = this.states[s];
    const hit = st.next.get(c);
    if (hit !== undefined) return hit;
    const chars = new Set<number>();
    let endOk = false;
    for (const q of st.chars) {
      if (!contains((this.nodes[q] as { set: CharSet }).set, c)) continue;
      const r = this.reach[q];
      for (const x of r.chars) chars.add(x);
      endOk ||= r.endOk;
    }
    const id = this.intern([...chars].sort((a, b) => a - b), endOk);
    st.next.set(c, id);
    return id;
  }

  /** Whether, with `len` characters written, some continuation of the state is accepted within the bounds. */
  live(s: number, len: number): boolean {
    return s >= 0 && this.fits(this.states[s].acc, len);
  }

  /** Whether some character in [lo, hi] can come next (being character number `len`) and leave a live state. */
  liveAfter(s: number, lo: number, hi: number, len: number): boolean {
    return this.fits(this.afterRange(s, lo, hi), len);
  }

  private fits(acc: Uint8Array, len: number): boolean {
    const a = Math.max(0, this.minLength - len);
    const b = Math.min(this.maxLength - len, this.K);
    for (let j = a; j <= b; j++) if (acc[j]) return true;
    return false;
  }

  /** The continuation lengths accepted after some character in [lo, hi]. */
  private afterRange(s: number, lo: number, hi: number): Uint8Array {
    if (s < 0) return new Uint8Array(0);
    const st = this.states[s];
    const key = `${lo},${hi}`;
    const hit = st.after.get(key);
    if (hit) return hit;
    // Characters between two consecutive range ends of the nodes' sets all lead to the same state.
    const cuts = new Set([lo]);
    for (const q of st.chars) {
      const set = (this.nodes[q] as { set: CharSet }).set;
      for (let k = 0; k < set.length; k += 2) {
        if (set[k] > lo && set[k] <= hi) cuts.add(set[k]);
        if (set[k + 1] + 1 > lo && set[k + 1] + 1 <= hi) cuts.add(set[k + 1] + 1);
      }
    }
    const acc = new Uint8Array(this.K + 1);
    for (const c of cuts) {
      const t = this.step(s, c);
      if (t < 0) continue;
      const ta = this.states[t].acc;
      for (let j = 0; j <= this.K; j++) acc[j] |= ta[j];
    }
    st.after.set(key, acc);
    return acc;
  }

  private intern(chars: number[], endOk: boolean): number {
    // Once the suffix loop is reached every continuation is accepted: the rest of the set adds nothing.
    if (chars.includes(this.matched)) [chars, endOk] = [[this.matched], true];
    if (chars.length === 0 && !endOk) return -1;
    const key = `${chars.join(',')}${endOk ? '+' : ''}`;
    const hit = this.ids.get(key);
    if (hit !== undefined) return hit;
    const acc = new Uint8Array(this.K + 1);
    acc[0] = endOk ? 1 : 0;
    for (const q of chars) for (let j = 1; j <= this.K; j++) acc[j] |= this.lengths[q][j];
    const id = this.states.length;
    this.states.push({ chars: Int32Array.from(chars), endOk, acc, next: new Map(), after: new Map() });
    this.ids.set(key, id);
    return id;
  }
}
