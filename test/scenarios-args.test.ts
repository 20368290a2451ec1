// Property tests: every argument set synthesized from a schema validates against that schema (checked by an
// independent validator, ajv, compiled here from the original schema with its $refs intact).
import { Ajv } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { describe, expect, it } from 'vitest';
import { generateFromPattern, synthesizeArgs, type JsonSchema } from '../src/scenarios/json-schema-args.js';
import { createRng } from '../src/util/rng.js';
import { everythingStdioTarget, fixtureStdioTarget } from './helpers/servers.js';
import type { Target } from '../src/mcp/types.js';

const addFormats = ((addFormatsModule as any).default ?? addFormatsModule) as (ajv: Ajv) => Ajv;

function oracleValidator(schema: JsonSchema) {
  const ajv = new Ajv({ strict: false, allErrors: true });
  addFormats(ajv);
  const { $schema: _s, ...rest } = schema;
  return ajv.compile(rest);
}

/** Lists a real server's tool schemas with the SDK client directly (the schemas are the subject here). */
async function serverSchemas(target: Target): Promise<Record<string, JsonSchema>> {
  if (target.kind !== 'stdio') throw new Error('stdio only');
  const client = new Client({ name: 'scenarios-args-test', version: '0' });
  await client.connect(new StdioClientTransport({ command: target.command, args: target.args, cwd: target.cwd, stderr: 'ignore' }));
  try {
    const { tools } = await client.listTools();
    return Object.fromEntries(tools.map((t) => [t.name, t.inputSchema as JsonSchema]));
  } finally {
    await client.close();
  }
}

const AWKWARD: Record<string, JsonSchema> = {
  nested: {
    type: 'object',
    properties: {
      user: {
        type: 'object',
        properties: {
          name: { type: 'string', minLength: 2, maxLength: 40 },
          address: { type: 'object', properties: { zip: { type: 'string', pattern: '^\\d{5}(-\\d{4})?$' }, city: { type: 'string' } }, required: ['zip'] },
        },
        required: ['name', 'address'],
      },
    },
    required: ['user'],
  },
  arrayOfObjects: {
    type: 'object',
    properties: {
      lines: {
        type: 'array',
        minItems: 2,
        maxItems: 4,
        items: { type: 'object', properties: { sku: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{2,4}$' }, qty: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['sku', 'qty'] },
      },
      tags: { type: 'array', items: { type: 'string', enum: ['a', 'b', 'c'] }, uniqueItems: true, maxItems: 3 },
    },
    required: ['lines'],
  },
  enumsAndBounds: {
    type: 'object',
    properties: {
      color: { enum: ['red', 'green', 'blue'] },
      level: { type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 3 },
      ratio: { type: 'number', minimum: 0, maximum: 1 },
      step: { type: 'number', multipleOf: 0.25, minimum: 1, maximum: 2 },
      negative: { type: 'integer', maximum: -5 },
      big: { type: 'integer', minimum: 1000000 },
      fixed: { const: 'v1' },
      nullable: { type: ['string', 'null'], maxLength: 3 },
    },
    required: ['color', 'level', 'ratio', 'step', 'negative', 'big', 'fixed', 'nullable'],
  },
  anyOf: {
    type: 'object',
    properties: {
      target: { anyOf: [{ type: 'string', format: 'email' }, { type: 'integer', minimum: 10, maximum: 20 }, { type: 'null' }] },
      either: { oneOf: [{ type: 'object', properties: { kind: { const: 'a' }, x: { type: 'number' } }, required: ['kind', 'x'] }, { type: 'object', properties: { kind: { const: 'b' }, y: { type: 'string', format: 'date' } }, required: ['kind', 'y'] }] },
      both: { allOf: [{ type: 'object', properties: { p: { type: 'string' } }, required: ['p'] }, { properties: { q: { type: 'boolean' } }, required: ['q'] }] },
    },
    required: ['target', 'either', 'both'],
  },
  refs: {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    $defs: {
      point: { type: 'object', properties: { x: { type: 'integer', minimum: -10, maximum: 10 }, y: { type: 'integer' } }, required: ['x', 'y'], additionalProperties: false },
      node: { type: 'object', properties: { label: { type: 'string' }, child: { $ref: '#/$defs/node' } }, required: ['label'] },
    },
    properties: { from: { $ref: '#/$defs/point' }, to: { $ref: '#/$defs/point' }, tree: { $ref: '#/$defs/node' }, when: { type: 'string', format: 'date-time' }, id: { type: 'string', format: 'uuid' } },
    required: ['from', 'to', 'tree', 'when', 'id'],
  },
  draft7Definitions: {
    $schema: 'http://json-schema.org/draft-07/schema#',
    definitions: { money: { type: 'object', properties: { amount: { type: 'number', exclusiveMinimum: 0 }, currency: { type: 'string', pattern: '^[A-Z]{3}$' } }, required: ['amount', 'currency'] } },
    type: 'object',
    properties: { price: { $ref: '#/definitions/money' }, tuple: { type: 'array', items: [{ type: 'string' }, { type: 'integer' }], minItems: 2 } },
    required: ['price', 'tuple'],
  },
  patterns: {
    type: 'object',
    properties: {
      email: { type: 'string', pattern: '^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$' },
      slug: { type: 'string', pattern: '^[a-z0-9]+(?:-[a-z0-9]+)*$', maxLength: 30 },
      hex: { type: 'string', pattern: '^#?[0-9a-fA-F]{6}$' },
      word: { type: 'string', pattern: '\\w+' },
      alt: { type: 'string', pattern: '^(draft|final|archived)$' },
      url: { type: 'string', format: 'uri' },
    },
    required: ['email', 'slug', 'hex', 'word', 'alt', 'url'],
  },
  empty: { type: 'object', properties: {} },
  noType: { properties: { anything: {}, n: { minimum: 3, maximum: 4 } }, required: ['n'] },
};

function checkCorpus(corpus: Record<string, JsonSchema>, seeds: number) {
  let checked = 0;
  for (const [name, schema] of Object.entries(corpus)) {
    const validate = oracleValidator(schema);
    for (let seed = 1; seed <= seeds; seed++) {
      const args = synthesizeArgs(schema, { rng: createRng(seed), optionalRate: seed % 3 === 0 ? 1 : 0.5 });
      const ok = validate(args);
      expect(ok, `${name} seed ${seed}: ${JSON.stringify(args)} → ${JSON.stringify(validate.errors)}`).toBe(true);
      checked++;
    }
  }
  return checked;
}

describe('argument synthesis', () => {
  it('hand-written awkward schemas: every synthesized argument set validates', () => {
    expect(checkCorpus(AWKWARD, 60)).toBe(Object.keys(AWKWARD).length * 60);
  });

  it("the fixture server's and server-everything's schemas: every synthesized argument set validates", async () => {
    const fixture = await serverSchemas(fixtureStdioTarget());
    const everything = await serverSchemas(everythingStdioTarget());
    expect(Object.keys(fixture)).toContain('place_order');
    expect(Object.keys(everything)).toContain('get-sum');
    const corpus = Object.fromEntries([
      ...Object.entries(fixture).map(([k, v]) => [`fixture/${k}`, v] as const),
      ...Object.entries(everything).map(([k, v]) => [`everything/${k}`, v] as const),
    ]);
    expect(checkCorpus(corpus, 40)).toBeGreaterThan(500);
  });

  it('candidates are used when they validate and ignored when they do not', () => {
    const schema = { type: 'object', properties: { book_id: { type: 'string', pattern: '^bk-\\d{3}$' } }, required: ['book_id'] };
    const good = synthesizeArgs(schema, { rng: createRng(1), candidates: ({ name }) => (name === 'book_id' ? ['bk-042'] : undefined) });
    expect(good).toEqual({ book_id: 'bk-042' });
    const bad = synthesizeArgs(schema, { rng: createRng(1), candidates: () => ['not-an-id', 7] });
    expect(bad.book_id).toMatch(/^bk-\d{3}$/);
  });

  it('pattern generator output matches its pattern', () => {
    const patterns = ['^bk-\\d{3}$', '^ord-\\d{4}$', '[A-Z][a-z]{2,5}', '^(ab|cd)+x?$', '^[^\\s]{3}$', '^\\d+(\\.\\d{1,2})?$'];
    for (const p of patterns) {
      for (let seed = 0; seed < 30; seed++) {
        const s = generateFromPattern(p, createRng(seed));
        expect(s !== undefined && new RegExp(p).test(s), `${p} → ${s}`).toBe(true);
      }
    }
    expect(generateFromPattern('^(?=x)y$', createRng(0))).toBeUndefined();
  });

  it('pattern generator: backreferences, symbols and other scripts, and the same string for the same seed', () => {
    // Symbols outside the readable first choice of characters, Cyrillic outside ASCII, and a backreference.
    for (const p of ['^[!@#]{2}$', '^[а-я]{3}$', '^(ab|cd)-\\1$', '^[^a-z0-9 ._-]{4}$']) {
      for (let seed = 0; seed < 10; seed++) {
        const s = generateFromPattern(p, createRng(seed));
        expect(s !== undefined && new RegExp(p, 'u').test(s), `${p} → ${s}`).toBe(true);
      }
    }
    const draw = (seed: number) => Array.from({ length: 5 }, (_, i) => generateFromPattern('^[A-Z]{2}-\\d{2,6}(\\.[a-z]+)?$', createRng(seed * 100 + i)));
    expect(draw(3)).toEqual(draw(3));
    expect(draw(3)).not.toEqual(draw(4));
    // Unbounded quantifiers stay short: at most three repetitions beyond their minimum.
    for (let seed = 0; seed < 20; seed++) expect(generateFromPattern('^x+y*$', createRng(seed))!.length).toBeLessThanOrEqual(7);
  });

  it('never repeats an item of a list unless its minimum length needs it', () => {
    const relation = { type: 'object', properties: { from: { enum: ['Priya Raman'] }, relationType: { enum: ['works on'] }, to: { enum: ['Beacon'] } }, required: ['from', 'relationType', 'to'] };
    const schema = (minItems?: number): JsonSchema => ({ type: 'object', properties: { relations: { type: 'array', items: relation, ...(minItems ? { minItems } : {}) } }, required: ['relations'] });
    for (let seed = 1; seed <= 40; seed++) {
      expect((synthesizeArgs(schema(), { rng: createRng(seed) }).relations as unknown[]).length).toBe(1);
      // one item can be made: the minimum of two is met by repeating it
      const item = { from: 'Priya Raman', relationType: 'works on', to: 'Beacon' };
      expect(synthesizeArgs(schema(2), { rng: createRng(seed) }).relations).toEqual([item, item]);
    }
  });
});
