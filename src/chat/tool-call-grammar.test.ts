/**
 * The tool-call grammar against an independent oracle: Ajv validates every call the automaton lets through
 * against the tool's JSON Schema. Random walks of the automaton (each next byte drawn uniformly among the bytes
 * it allows) must always finish with a call Ajv accepts, and must never reach a state that allows no byte.
 */
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { createRng } from '../util/rng.js';
import { compileJsonGrammar, compileToolCallGrammar, FREE, isFree, startState, step, type GrammarState, type ToolCallGrammar } from './tool-call-grammar.js';
import { UnsupportedSchema } from './json-schema-grammar.js';

const TOOLS = [
  {
    name: 'search_books',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string', description: 'words' },
        genre: { type: 'string', enum: ['fantasy', 'history', 'science'] },
        max_results: { type: 'integer', minimum: 1, maximum: 20, default: 5 },
      },
      required: ['query'],
      additionalProperties: false,
    },
  },
  {
    name: 'convert_price',
    parameters: { type: 'object', properties: { amount: { type: 'number', minimum: 0 }, currency: { enum: ['EUR', 'JPY', 'GBP'] } }, required: ['amount', 'currency'] },
  },
  {
    name: 'place_order',
    parameters: {
      type: 'object',
      properties: {
        customer: { type: 'object', properties: { name: { type: 'string', minLength: 1, maxLength: 8 }, vip: { type: 'boolean' } }, required: ['name'] },
        items: {
          type: 'array',
          minItems: 1,
          maxItems: 3,
          items: { type: 'object', properties: { book: { type: 'string' }, quantity: { type: 'integer', minimum: 1, maximum: 100 } }, required: ['book', 'quantity'] },
        },
      },
      required: ['customer', 'items'],
    },
  },
  { name: 'ping', parameters: { type: 'object', properties: {} } },
  {
    name: 'mixed',
    parameters: {
      type: 'object',
      properties: {
        note: { anyOf: [{ type: 'string', maxLength: 5 }, { type: 'null' }] },
        ratio: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1 },
        delta: { type: 'integer', minimum: -12, maximum: -3 },
        tags: { type: 'array', items: { enum: ['a', 'ab', 1, 10, null] } },
        meta: { type: 'object' },
        point: { $ref: '#/$defs/Point' },
      },
      required: ['ratio', 'delta'],
      $defs: { Point: { type: 'object', properties: { x: { type: 'integer' }, y: { type: ['number', 'null'] } }, required: ['x'] } },
    },
  },
  { name: 'patterned', parameters: { type: 'object', properties: { id: { type: 'string', pattern: '^bk-\\d{3}$' } }, required: ['id'] } },
  {
    name: 'paths',
    parameters: {
      type: 'object',
      properties: {
        file: { type: 'string', pattern: '^[a-z]+\\.(txt|md)$', maxLength: 8 },
        // Characters that need JSON escapes, so the automaton must see the decoded ones.
        quoted: { type: 'string', pattern: '^["\\\\/]{1,3}$' },
        tag: { type: ['string', 'null'], pattern: 'x', minLength: 2 },
        // Lookahead cannot be enforced: relaxed, the string otherwise free.
        ahead: { type: 'string', pattern: '^(?=a)' },
      },
      required: ['file'],
    },
  },
  { name: 'composed', parameters: { allOf: [{ type: 'object', properties: { a: { type: 'string' } } }, { required: ['a'] }] } },
];

const enc = (s: string) => new TextEncoder().encode(s);

/** Walks text from a state; null once a byte cannot come next. */
function walk(g: ToolCallGrammar, text: string, from: GrammarState = FREE): GrammarState | null {
  let s: GrammarState | null = from;
  for (const b of enc(text)) {
    s = step(g, s, b);
    if (!s) return null;
  }
  return s;
}

const call = (name: string, args: string) => `<tool_call>{"name": "${name}", "arguments": ${args}}</tool_call>`;

describe('tool-call grammar', () => {
  const g = compileToolCallGrammar(TOOLS);

  it('reports what it enforces, relaxes and cannot express', () => {
    const byName = new Map(g.tools.map((t) => [t.name, t]));
    expect(byName.get('patterned')!.relaxed).toEqual([]);
    expect(byName.get('patterned')!.unsupported).toBeUndefined();
    expect(byName.get('paths')!.relaxed).toEqual(['pattern']);
    expect(byName.get('composed')!.unsupported).toBe('allOf');
    expect(byName.get('search_books')!.relaxed).toEqual([]);
  });

  it('accepts valid calls, between free text, and leaves free text free', () => {
    const valid = [
      `Let me look. ${call('search_books', '{"query": "dune", "max_results": 20}')} done`,
      `<tool_call>\n{"name": "search_books", "arguments": {"genre": "history", "query": "\\"rome\\" \\u00e9t\u00e9"}}\n</tool_call>`,
      call('convert_price', '{"currency": "JPY", "amount": 0.25}') + call('convert_price', '{"amount": 12, "currency": "EUR"}'),
      call('place_order', '{"customer": {"name": "Ann", "vip": true}, "items": [{"book": "bk-001", "quantity": 100}, {"quantity": 1, "book": ""}]}'),
      call('ping', '{}'),
      call('mixed', '{"ratio": 0.5, "delta": -12, "note": null, "tags": [10, "ab", null, 1], "meta": {"k": [1, {"z": false}]}, "point": {"x": -3, "y": null}}'),
      call('composed', '{"anything": [1, 2]}'),
      call('patterned', '{"id": "bk-024"}'),
      call('patterned', '{"id": "bk-\\u0030\\u00312"}'), // escapes are decoded before the pattern sees them
      call('paths', '{"file": "notes.md", "quoted": "\\"\\\\\\/", "tag": "axe", "ahead": "b"}'),
      call('paths', '{"file": "a.txt", "tag": null}'),
      // Inside a think block, <tool_call> is reasoning, not a call.
      '<think>maybe <tool_call>{oops</think>ok',
    ];
    for (const text of valid) {
      const s = walk(g, text);
      expect(s, text).not.toBeNull();
      expect(isFree(s!), text).toBe(true);
    }
  });

  it('refuses what the schemas exclude', () => {
    const invalid = [
      call('search_book', '{"query": "x"}'), // no such tool
      call('search_books', '{"max_results": 5}'), // required query missing
      call('search_books', '{"query": "x", "query": "y"}'), // a key twice
      call('search_books', '{"query": "x", "author": "y"}'), // undeclared key
      call('search_books', '{"query": 5}'), // wrong type
      call('search_books', '{"query": "x", "max_results": 21}'),
      call('search_books', '{"query": "x", "max_results": 0}'),
      call('search_books', '{"query": "x", "max_results": 05}'),
      call('search_books', '{"query": "x", "max_results": 2.5}'),
      call('search_books', '{"query": "x", "genre": "poetry"}'),
      call('convert_price', '{"amount": -1, "currency": "EUR"}'),
      call('place_order', '{"customer": {"name": ""}, "items": [{"book": "a", "quantity": 1}]}'), // minLength 1
      call('place_order', '{"customer": {"name": "ninechars"}, "items": [{"book": "a", "quantity": 1}]}'), // maxLength 8
      call('place_order', '{"customer": {"name": "A"}, "items": []}'), // minItems 1
      call('place_order', `{"customer": {"name": "A"}, "items": [${Array(4).fill('{"book": "a", "quantity": 1}').join(', ')}]}`),
      call('ping', '{"x": 1}'),
      call('mixed', '{"ratio": 1, "delta": -5}'), // exclusive maximum
      call('mixed', '{"ratio": 0, "delta": -5}'), // exclusive minimum
      call('mixed', '{"ratio": 0.5, "delta": -2}'),
      call('mixed', '{"ratio": 0.5, "delta": -5, "note": "toolong"}'),
      call('mixed', '{"ratio": 0.5, "delta": -5, "tags": [100]}'),
      call('mixed', '{"ratio": 0.5, "delta": -5, "point": {"y": 1}}'),
      call('mixed', '{"ratio": 0.5, "delta": -5,}'), // trailing comma
      '<tool_call>{"arguments": {}, "name": "ping"}</tool_call>', // name first
      '<tool_call>{"name": "ping", "arguments": {}}<|im_end|>',
      call('search_books', '{"query": "line\nbreak"}'), // raw control character in a string
      call('search_books', '{"query": "a</tool_call>b"}'), // a parser would end the call inside the string
      // Patterns: the tiny model's own invalid calls, then others.
      call('patterned', '{"id": "bk-024, "}'),
      call('patterned', '{"id": "bk-02"}'),
      call('patterned', '{"id": "au-04"}'),
      call('patterned', '{"id": "bk-\\u00410"}'),
      call('paths', '{"file": "notes.doc"}'),
      call('paths', '{"file": "abcde.txt"}'), // maxLength 8
      call('paths', '{"file": "a.md", "quoted": "a"}'),
      call('paths', '{"file": "a.md", "quoted": ""}'),
      call('paths', '{"file": "a.md", "tag": "x"}'), // minLength 2
      call('paths', '{"file": "a.md", "tag": "ab"}'), // no x
    ];
    for (const text of invalid) {
      const s = walk(g, text);
      expect(s === null || !isFree(s), text).toBe(true);
    }
  });

  it('lets through only calls that Ajv validates, and never reaches a dead end (random walks)', () => {
    const ajv = new Ajv({ strict: false });
    // Bytes the walks draw from: structure, digits, letters of the names, keys and enums, a UTF-8 character.
    const alphabet = [...new Set(enc(' \n{}[]":,.-0123456789\\/abcdefghijklmnopqrstuvwxyzABEFGJPRUY_<>é'))];
    const rng = createRng(7);
    let finished = 0;
    for (const tool of TOOLS) {
      // The one relaxed pattern (a lookahead) is left out: the grammar does not enforce it.
      const relaxedOut = tool.name === 'paths' ? { ...tool.parameters, properties: { ...tool.parameters.properties, ahead: { type: 'string' } } } : tool.parameters;
      const validate = ajv.compile(relaxedOut);
      for (let w = 0; w < 60; w++) {
        const prefix = `<tool_call>{"name": "${tool.name}", "arguments": `;
        let s = walk(g, prefix)!;
        const out: number[] = [];
        while (!isFree(s) && out.length < 3000) {
          const options = alphabet.flatMap((b) => {
            const n = step(g, s, b);
            return n ? [[b, n] as const] : [];
          });
          expect(options.length, `dead end after ${prefix}${new TextDecoder().decode(Uint8Array.from(out))}`).toBeGreaterThan(0);
          const [b, n] = options[Math.floor(rng.next() * options.length)];
          out.push(b);
          s = n;
        }
        if (!isFree(s)) continue;
        finished++;
        const text = prefix + new TextDecoder().decode(Uint8Array.from(out));
        const body = JSON.parse(text.slice('<tool_call>'.length, text.lastIndexOf('</tool_call>')));
        expect(body.name).toBe(tool.name);
        if (tool.name === 'composed') expect(typeof body.arguments).toBe('object');
        else expect(validate(body.arguments), `${text}: ${JSON.stringify(validate.errors)}`).toBe(true);
      }
    }
    // Almost every walk ends within 3000 bytes (free strings end at a drawn quote).
    expect(finished).toBeGreaterThan(0.9 * 60 * TOOLS.length);
  });
});

describe('required, single and JSON grammars', () => {
  const ping = call('ping', '{}');
  const ends = (g: ToolCallGrammar, text: string) => {
    const s = walk(g, text, startState(g));
    return s !== null && isFree(s);
  };

  it('required: the turn opens with a call (after whitespace) and cannot end before one', () => {
    const g = compileToolCallGrammar(TOOLS, { require: true });
    expect(ends(g, ping)).toBe(true);
    expect(ends(g, `\n ${ping} then text ${ping}`)).toBe(true);
    expect(walk(g, 'Sure, ', startState(g))).toBeNull();
    expect(isFree(startState(g))).toBe(false); // no end-of-turn token before the call
    expect(walk(g, ' '.repeat(17), startState(g))).toBeNull();
  });

  it('single: once a call has closed, no other opens; text may follow', () => {
    const g = compileToolCallGrammar(TOOLS, { single: true });
    expect(ends(g, `text ${ping} after <tool_ca`)).toBe(true);
    expect(walk(g, `${ping}${ping}`)).toBeNull();
    expect(walk(g, `${ping} <think>x</think> ${ping}`)).toBeNull();
    const both = compileToolCallGrammar(TOOLS, { require: true, single: true });
    expect(ends(both, ping)).toBe(true);
    expect(walk(both, `${ping}\n${ping}`, startState(both))).toBeNull();
  });

  it('JSON: the whole turn is one object of the schema, then whitespace', () => {
    const g = compileJsonGrammar({ type: 'object', properties: { a: { type: 'integer' }, b: { enum: ['x', 'y'] } }, required: ['a'], additionalProperties: false });
    expect(ends(g, ' {"a": 3, "b": "y"}\n')).toBe(true);
    expect(ends(g, '{"b": "x"')).toBe(false);
    for (const bad of ['{"b": "x"}', 'Here: {"a": 1}', '{"a": 1} and', '{"a": 1, "c": 2}', '{"a": "1"}', ping]) expect(walk(g, bad, startState(g)), bad).toBeNull();
    expect(isFree(walk(g, '{"a": 1', startState(g))!)).toBe(false); // the turn cannot end inside the object
    const any = compileJsonGrammar({ type: 'object' });
    expect(ends(any, '{"k": [1, {"z": null}], "s": "t"}')).toBe(true);
    expect(walk(any, '[1]', startState(any))).toBeNull();
  });

  it('JSON with tools: the turn is calls (as the options allow) or the object, never both', () => {
    const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };
    const g = compileJsonGrammar(schema, TOOLS);
    expect(ends(g, '{"a": 1}')).toBe(true);
    expect(ends(g, `${ping}\n${ping}`)).toBe(true);
    expect(walk(g, `${ping} {"a": 1}`, startState(g))).toBeNull();
    expect(walk(g, `<tool_cal {"a": 1}`, startState(g))).toBeNull();
    const single = compileJsonGrammar(schema, TOOLS, { single: true });
    expect(walk(single, `${ping}${ping}`, startState(single))).toBeNull();
    const required = compileJsonGrammar(schema, TOOLS, { require: true });
    expect(walk(required, '{"a": 1}', startState(required))).toBeNull();
    expect(ends(required, ping)).toBe(true);
  });

  it('JSON: a schema it cannot enforce throws, naming the feature', () => {
    expect(() => compileJsonGrammar({ type: 'object', properties: { a: { not: {} } } })).toThrow(UnsupportedSchema);
    expect(() => compileJsonGrammar({ type: 'array', items: {} })).toThrow(/root that is not an object/);
  });
});
