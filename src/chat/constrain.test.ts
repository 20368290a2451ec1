/**
 * Token-level constrained decoding on the bundled tiny model's real tokenizer (byte-level BPE, 1024 ids, with
 * `<tool_call>` and `</tool_call>` as added tokens):
 *   - free text is unmasked, and a turn cannot end (no `<|im_end|>`) inside a call;
 *   - the trie walk's allowed sets equal a brute-force check of every token's bytes (an independent path);
 *   - random decoding that draws each token uniformly among the allowed ones always yields calls that the
 *     tool-call parser reads and Ajv validates against the tool's schema;
 *   - replaying the constraint over the drawn tokens gives back the same allowed sets (what training uses);
 * and on the real Qwen3 tokenizer (151,936 ids), the allowed sets of free text, a call's start, a string and a
 * number equal the brute-force check (the shortcuts for free text and strings included).
 */
import { Ajv } from 'ajv';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { makeRandomModel } from '../../scripts/random-model.js';
import { HfTokenizer } from './tokenizer.js';
import { parseToolCalls } from './parse-tool-call.js';
import { createRng } from '../util/rng.js';
import { replayMasks, tokenTable, ToolCallConstrainer } from './constrain.js';
import { compileJsonGrammar, FREE, isFree, startState, type GrammarState } from './tool-call-grammar.js';

const MODEL = join(import.meta.dirname, '..', '..', 'fixtures', 'models', 'tiny-bookshop');
const VOCAB = 1024;

const TOOLS = [
  {
    name: 'search_books',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string' },
        genre: { type: 'string', enum: ['fantasy', 'history', 'science'] },
        max_results: { type: 'integer', minimum: 1, maximum: 20 },
      },
      required: ['query'],
      additionalProperties: false,
    },
  },
  { name: 'get_book', parameters: { type: 'object', properties: { book_id: { type: 'string', pattern: '^bk-\\d{3}$' } }, required: ['book_id'] } },
  { name: 'convert_price', parameters: { type: 'object', properties: { amount: { type: 'number', minimum: 0 }, currency: { enum: ['EUR', 'JPY'] } }, required: ['amount', 'currency'] } },
  { name: 'complete_task', parameters: { type: 'object', properties: { summary: { type: 'string', maxLength: 40 } }, required: ['summary'] } },
];

let tokenizer: HfTokenizer;
let constrainer: ToolCallConstrainer;
beforeAll(async () => {
  tokenizer = await HfTokenizer.load(MODEL);
  constrainer = new ToolCallConstrainer(tokenTable(tokenizer, VOCAB), TOOLS);
});

const has = (m: Uint32Array, id: number) => ((m[id >>> 5] >>> (id & 31)) & 1) === 1;
const ids = (m: Uint32Array) => Array.from({ length: VOCAB }, (_, id) => id).filter((id) => has(m, id));

/** The allowed set by brute force: every token's bytes walked from the state on their own. */
function bruteForce(s: GrammarState): number[] {
  const out: number[] = [];
  for (let id = 0; id < VOCAB; id++) if (constrainer.advanceState(s, id) !== null) out.push(id);
  return out;
}

describe('constrained tool calls on the tiny model tokenizer', () => {
  it('leaves free text unmasked and keeps a call open until it is closed', () => {
    expect(constrainer.allowedIn(FREE)).toBeNull();
    const open = tokenizer.tokenToId('<tool_call>')!;
    const eos = tokenizer.tokenToId('<|im_end|>')!;
    const inCall = constrainer.advanceState(FREE, open)!;
    expect(isFree(inCall)).toBe(false);
    const m = constrainer.allowedIn(inCall)!;
    expect(m).not.toBeNull();
    expect(has(m, eos)).toBe(false);
    expect(has(m, tokenizer.encode('{')[0])).toBe(true);
    expect(ids(m)).toEqual(bruteForce(inCall));
  });

  it('draws only calls the parser reads and Ajv validates; the allowed sets match brute force and replay', () => {
    const ajv = new Ajv({ strict: false });
    const validators = new Map(TOOLS.map((t) => [t.name, ajv.compile(t.parameters)]));
    const rng = createRng(3);
    const open = tokenizer.tokenToId('<tool_call>')!;
    let finished = 0;
    let checked = 0;
    const walks = 40;
    for (let w = 0; w < walks; w++) {
      const c = constrainer.start();
      const drawn: number[] = [];
      const seen: (Uint32Array | null)[] = [];
      let s: GrammarState = FREE;
      // The turn opens a call at once, then each token is drawn uniformly among those allowed.
      for (let k = 0; k < 300; k++) {
        const m = c.allowed();
        seen.push(m);
        const tok = k === 0 ? open : (() => { const a = ids(m!); return a[Math.floor(rng.next() * a.length)]; })();
        if (k > 0 && k % 7 === 0 && checked < 40) {
          expect(ids(m!)).toEqual(bruteForce(s));
          checked++;
        }
        c.advance(tok);
        drawn.push(tok);
        s = constrainer.advanceState(s, tok)!;
        if (k > 0 && isFree(s)) break;
      }
      expect(c.deadEnd).toBe(false);
      expect(replayMasks(constrainer, drawn)).toEqual(seen);
      if (!isFree(s)) continue;
      finished++;
      const parsed = parseToolCalls(tokenizer.decode(drawn, { skipSpecialTokens: true }));
      expect(parsed.invalidToolCalls, tokenizer.decode(drawn, { skipSpecialTokens: true })).toEqual([]);
      expect(parsed.toolCalls).toHaveLength(1);
      const [call] = parsed.toolCalls;
      const validate = validators.get(call.name)!;
      expect(validate(JSON.parse(call.arguments)), `${call.name} ${call.arguments}: ${JSON.stringify(validate.errors)}`).toBe(true);
    }
    expect(checked).toBeGreaterThan(10);
    expect(finished).toBeGreaterThan(walks / 2);
  });

  it('reports tools it cannot constrain and keeps their arguments a JSON object', () => {
    const lookbehind = { name: 'lookbehind', parameters: { type: 'object', properties: { q: { type: 'string', pattern: '(?<=a)b' } } } };
    const c = new ToolCallConstrainer(tokenTable(tokenizer, VOCAB), [...TOOLS, lookbehind, { name: 'odd', parameters: { type: 'object', not: { required: ['x'] } } }]);
    expect(c.report.unsupported).toEqual([{ tool: 'odd', reason: 'not' }]);
    // get_book's pattern is enforced; a lookbehind cannot be, and is reported.
    expect(c.report.relaxed).toEqual([{ tool: 'lookbehind', keywords: ['pattern'] }]);
    expect(c.report.constrained).toEqual([...TOOLS.map((t) => t.name), 'lookbehind']);
  });
});

describe('constrained tool calls on the Qwen3 tokenizer', () => {
  it('allows exactly the tokens a brute-force walk allows, in free text, strings and numbers', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mcprl-constrain-qwen-'));
    try {
      await makeRandomModel(dir, { arch: 'qwen3', hiddenSize: 32, numLayers: 1, numHeads: 2, numKvHeads: 1, headDim: 16, intermediateSize: 32 });
      const qwen = await HfTokenizer.load(dir);
      const V = 151936;
      const c = new ToolCallConstrainer(tokenTable(qwen, V), TOOLS);
      const at = (text: string) => qwen.encode(text).reduce<GrammarState>((s, id) => c.advanceState(s, id)!, FREE);
      const texts = ['Let me check.', '<tool_call>', '<tool_call>\n{"name": "search_books", "arguments": {"query": "du', '<tool_call>\n{"name": "convert_price", "arguments": {"amount": 1', '<tool_call>\n{"name": "get_book", "arguments": {"book_id": "bk-0'];
      for (const text of texts) {
        const s = at(text);
        const m = c.allowedIn(s);
        const brute: number[] = [];
        for (let id = 0; id < V; id++) if (c.advanceState(s, id) !== null) brute.push(id);
        if (m === null) expect(brute.length, text).toBe(V);
        else expect(Array.from({ length: V }, (_, id) => id).filter((id) => has(m, id)), text).toEqual(brute);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 300_000);
});

describe('required calls and JSON answers, token by token', () => {
  /** Draws tokens uniformly among the allowed ones until the turn may end; checks each set against brute force. */
  function draw(c: ToolCallConstrainer, seed: number): { text: string; ended: boolean } {
    const rng = createRng(seed);
    const run = c.start();
    let s = startState(c.grammar);
    const drawn: number[] = [];
    for (let k = 0; k < 400; k++) {
      const m = run.allowed();
      const allowed = m ? ids(m) : Array.from({ length: VOCAB }, (_, id) => id);
      if (k % 5 === 0) expect(allowed).toEqual(Array.from({ length: VOCAB }, (_, id) => id).filter((id) => c.advanceState(s, id) !== null));
      // Once the turn may end, end it (a textless token), as a model's end-of-turn would.
      if (k > 0 && isFree(s)) return { text: tokenizer.decode(drawn, { skipSpecialTokens: true }), ended: true };
      const tok = allowed[Math.floor(rng.next() * allowed.length)];
      run.advance(tok);
      drawn.push(tok);
      s = c.advanceState(s, tok)!;
    }
    expect(run.deadEnd).toBe(false);
    return { text: tokenizer.decode(drawn, { skipSpecialTokens: true }), ended: false };
  }

  it("tool_choice 'required' with one tool: the turn is exactly one call of it, valid for its schema", () => {
    const c = new ToolCallConstrainer(tokenTable(tokenizer, VOCAB), [TOOLS[2]], { require: true, single: true });
    const validate = new Ajv().compile(TOOLS[2].parameters);
    let ended = 0;
    for (let seed = 1; seed <= 12; seed++) {
      const { text, ended: done } = draw(c, seed);
      if (!done) continue;
      ended++;
      const parsed = parseToolCalls(text);
      expect(parsed.toolCalls.map((t) => t.name), text).toEqual(['convert_price']);
      expect(validate(JSON.parse(parsed.toolCalls[0].arguments)), text).toBe(true);
    }
    expect(ended).toBeGreaterThan(6);
  });

  it('response_format json_schema: the turn is one object valid for the schema', () => {
    const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 9 }, tag: { enum: ['a', 'b'] } }, required: ['n', 'tag'], additionalProperties: false };
    const c = new ToolCallConstrainer(tokenTable(tokenizer, VOCAB), compileJsonGrammar(schema));
    const validate = new Ajv().compile(schema);
    for (let seed = 1; seed <= 12; seed++) {
      const { text, ended } = draw(c, seed);
      expect(ended, text).toBe(true);
      expect(validate(JSON.parse(text)), text).toBe(true);
    }
  });
});
