/**
 * The pattern automaton against JavaScript's own RegExp (with the u flag, as Ajv builds JSON Schema patterns)
 * as the oracle, on hand-written and randomly generated patterns under several length bounds:
 *   - on every string up to 4 characters over an alphabet drawn from the pattern, the automaton accepts exactly
 *     what `RegExp.test` accepts within the bounds, and never declares a prefix of an accepted string dead;
 *   - from every live state some continuation is accepted (found by a search over the automaton, then checked by
 *     RegExp), and from every dead prefix no continuation of up to 3 characters is (RegExp, brute force).
 */
import { describe, expect, it } from 'vitest';
import { createRng } from '../util/rng.js';
import { PatternAutomaton, UnsupportedPattern } from './pattern-automaton.js';

const FIXED = [
  // The bookshop fixture's patterns.
  '^bk-\\d{3}$', '^au-\\d{2}$', '^ord-\\d{4}$', '^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$',
  // Unanchored, anchored at one end, anchors inside alternatives and groups.
  'abc', 'a|b$', '^a|b', 'a$|^b', '(^a|b)c', '$^', '^$', '.',
  // Quantifiers, lazy ones too, empty loops, counted repetition.
  '(ab)+c?', 'x{2,3}', 'x{2,}y', '^x{0}y$', 'a*?b', '^a+?$', '(?:ab|cd){1,2}$', '^(a|)+$', '(a*)*b', '^(?:a?){3}b$',
  // Classes, escapes, named groups.
  '[^a-c]*d', '\\w+\\s\\W', 'colou?r', '^.{2,4}$', '^(?<y>\\d{4})-\\d{2}$', '\\.\\*\\+\\?', '[\\]\\-a]+$', '\\x61\\u0062\\u{63}',
  '^[]', '^[^]{3}$', 'é+', '\\t|\\n', '^[\\s\\S]$', '\\u00e9$', '[\\d-]{2}', '^\\D\\S$', '[\\b]', '\\cJ', '\\0', '^\\/$', '[.*+?^${}()|[\\]\\\\]',
];

const BOUNDS: [number, number][] = [[0, Infinity], [2, Infinity], [0, 3], [1, 2]];

/** A random pattern from a small grammar (atoms, classes, groups, quantifiers, alternation, anchors). */
function randomPattern(rng: ReturnType<typeof createRng>, depth = 0): string {
  const atoms = ['a', 'b', '.', '[ab]', '[^a]', '\\d', '-', '\\s', '[a-c1]'];
  const n = 1 + Math.floor(rng.next() * 3);
  let out = '';
  for (let i = 0; i < n; i++) {
    let atom = depth < 2 && rng.next() < 0.25 ? `(${randomPattern(rng, depth + 1)})` : atoms[Math.floor(rng.next() * atoms.length)];
    const q = rng.next();
    if (q < 0.15) atom += '*';
    else if (q < 0.25) atom += '+';
    else if (q < 0.35) atom += '?';
    else if (q < 0.45) atom += `{${Math.floor(rng.next() * 2)},${1 + Math.floor(rng.next() * 2)}}`;
    out += atom;
  }
  if (depth === 0 && rng.next() < 0.4) out = '^' + out;
  if (depth === 0 && rng.next() < 0.4) out += '$';
  if (rng.next() < 0.2) out += `|${atoms[Math.floor(rng.next() * atoms.length)]}`;
  return out;
}

const codePoints = (s: string) => Array.from(s, (c) => c.codePointAt(0)!);

/** The automaton's state after s (-1 once dead) and whether every prefix's state was live. */
function run(rx: PatternAutomaton, s: string): { state: number; prefixesLive: boolean } {
  let state = rx.start;
  let prefixesLive = rx.live(state, 0);
  let len = 0;
  for (const c of codePoints(s)) {
    state = rx.step(state, c);
    len++;
    if (state < 0) return { state, prefixesLive: false };
    prefixesLive &&= rx.live(state, len);
  }
  return { state, prefixesLive };
}

/** Every string of up to `max` characters over the alphabet. */
function allStrings(alphabet: string[], max: number): string[] {
  const out = [''];
  let layer = [''];
  for (let l = 0; l < max; l++) {
    layer = layer.flatMap((p) => alphabet.map((c) => p + c));
    out.push(...layer);
  }
  return out;
}

/** A shortest accepted continuation from a state, by breadth-first search over (state, length), or null. */
function completion(rx: PatternAutomaton, state: number, len: number, min: number, max: number, alphabet: string[]): string | null {
  const seen = new Set<string>([`${state}:${len}`]);
  let layer: [number, number, string][] = [[state, len, '']];
  for (let depth = 0; depth < 40 && layer.length; depth++) {
    const nextLayer: [number, number, string][] = [];
    for (const [s, l, w] of layer) {
      if (rx.accepts(s) && l >= min && l <= max) return w;
      for (const c of alphabet) {
        const t = rx.step(s, c.codePointAt(0)!);
        const key = `${t}:${Math.min(l + 1, min + 50)}`;
        if (t < 0 || l + 1 > max || seen.has(key)) continue;
        seen.add(key);
        nextLayer.push([t, l + 1, w + c]);
      }
    }
    layer = nextLayer;
  }
  return null;
}

function check(pattern: string, min: number, max: number) {
  const re = new RegExp(pattern, 'u');
  const rx = new PatternAutomaton(pattern, min, max);
  const oracle = (s: string) => re.test(s) && codePoints(s).length >= min && codePoints(s).length <= max;
  // The pattern's own characters (escapes' letters too), and a few others every class can use.
  const alphabet = [...new Set([...Array.from(pattern).filter((c) => c.codePointAt(0)! < 0x10000), 'a', 'b', 'c', '1', '-', ' ', 'é', '\n', '@', '.', '\t', '\b', '\0'])];
  const completions = new Map<string, string | null>();
  const complete = (state: number, len: number) => {
    const key = `${state}:${len}`;
    if (!completions.has(key)) completions.set(key, completion(rx, state, len, min, max, alphabet));
    return completions.get(key)!;
  };
  const where = `pattern ${JSON.stringify(pattern)}, length ${min}..${max}`;
  // Failures are collected and compared once: an expect per string would cost more than the checks.
  const failures: string[] = [];
  for (const s of allStrings(alphabet.slice(0, 10), 3)) {
    const { state, prefixesLive } = run(rx, s);
    const len = codePoints(s).length;
    const accepted = state >= 0 && rx.accepts(state) && len >= min && len <= max;
    if (accepted !== oracle(s)) failures.push(`${JSON.stringify(s)}: automaton ${accepted}, RegExp ${!accepted}`);
    if (accepted && !prefixesLive) failures.push(`a prefix of ${JSON.stringify(s)} was declared dead`);
    if (state >= 0 && rx.live(state, len)) {
      const w = complete(state, len);
      if (w === null) failures.push(`live after ${JSON.stringify(s)} but no completion`);
      else if (!oracle(s + w)) failures.push(`${JSON.stringify(s + w)}, completed by the automaton, does not match`);
    } else if (s.length <= 2) {
      for (const w of allStrings(alphabet.slice(0, 8), 2)) if (oracle(s + w)) failures.push(`${JSON.stringify(s)} declared dead, but ${JSON.stringify(s + w)} matches`);
    }
  }
  expect(failures.slice(0, 5), where).toEqual([]);
}

describe('pattern automaton', () => {
  it('matches RegExp on the fixed patterns, under every length bound', () => {
    for (const p of FIXED) for (const [min, max] of BOUNDS) check(p, min, max);
  });

  it('matches RegExp on 300 random patterns', () => {
    const rng = createRng(11);
    for (let i = 0; i < 300; i++) {
      const p = randomPattern(rng);
      const [min, max] = BOUNDS[i % BOUNDS.length];
      check(p, min, max);
    }
  });

  it('accepts exactly the fixture ids, and refuses at once what cannot become one', () => {
    const rx = new PatternAutomaton('^bk-\\d{3}$', 0, Infinity);
    const after = (s: string) => codePoints(s).reduce((st, c) => (st < 0 ? st : rx.step(st, c)), rx.start);
    expect(rx.accepts(after('bk-024'))).toBe(true);
    expect(rx.accepts(after('bk-02'))).toBe(false);
    expect(after('bk-024,')).toBe(-1);
    expect(after('bk-02,')).toBe(-1);
    expect(after('au')).toBe(-1);
    // Live within bounds: "bk-" fits no string of at most 5 characters.
    const short = new PatternAutomaton('^bk-\\d{3}$', 0, 5);
    expect(short.live(short.start, 0)).toBe(false);
  });

  it('takes BMP characters only (no astral ones, no surrogates)', () => {
    const rx = new PatternAutomaton('^.$', 0, Infinity);
    expect(rx.step(rx.start, 0x1f600)).toBe(-1);
    expect(rx.step(rx.start, 0xd800)).toBe(-1);
    expect(rx.accepts(rx.step(rx.start, 0xe9))).toBe(true);
    expect(rx.liveAfter(rx.start, 0x10000, 0x10ffff, 1)).toBe(false);
    expect(rx.liveAfter(rx.start, 0xd800, 0xe000, 1)).toBe(true);
  });

  it('refuses what it cannot enforce, naming it', () => {
    const cases: [string, RegExp][] = [
      ['(a)\\1', /backreference/], ['(?<x>a)\\k<x>', /named backreference/], ['(?=a)a', /lookaround/], ['(?!a)b', /lookaround/],
      ['(?<=a)b', /lookaround/], ['(?<!a)b', /lookaround/], ['\\bword', /word boundary/], ['\\p{L}', /unicode property/],
      ['(', /u flag/], ['[b-a]', /u flag/], ['a{2,1}', /u flag/], ['\\-', /u flag/], [`a{5000}`, /automaton nodes/],
    ];
    for (const [p, why] of cases) expect(() => new PatternAutomaton(p, 0, Infinity), p).toThrow(why);
    expect(() => new PatternAutomaton('(', 0, Infinity)).toThrow(UnsupportedPattern);
  });
});
