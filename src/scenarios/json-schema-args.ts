/**
 * Synthesizes argument values that validate against a tool's JSON Schema inputSchema.
 *
 * Covers what MCP servers actually publish: types (and type arrays), enum/const, numeric bounds (inclusive,
 * exclusive in both draft-4 and draft-6+ forms, multipleOf), string lengths, simple regex patterns, common
 * formats, required/optional properties, nested objects, arrays (items, tuples, min/max/unique items),
 * anyOf/oneOf/allOf and local `$ref`s (`#/definitions/…`, `#/$defs/…`). Values discovered from the server can
 * be offered per property through `candidates`; a candidate is used only if it validates against that
 * property's schema, so discovered data can never make arguments invalid. Every result is checked with ajv
 * against the whole schema before it is returned.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import randexpModule from 'randexp';
import { McprlError } from '../util/errors.js';
import type { Rng } from '../util/rng.js';

export type JsonSchema = Record<string, unknown>;

export interface CandidateContext {
  /** The property name this value is for (the innermost key), if any. */
  name?: string;
  /** Keys from the argument root to this value; array elements appear as "[]". */
  path: string[];
  /** The property's schema, with `$ref`s resolved. */
  schema: JsonSchema;
}

export interface SynthesisOptions {
  rng: Rng;
  /** Probability of including each optional property. Default 0.5. */
  optionalRate?: number;
  /** Values discovered from the server that may be used for a property (tried in random order). */
  candidates?: (ctx: CandidateContext) => readonly unknown[] | undefined;
  /** Whole-object attempts before giving up. Default 20. */
  attempts?: number;
}

// ajv-formats is CommonJS; under NodeNext its default export is the module object in some setups.
const addFormats = ((addFormatsModule as any).default ?? addFormatsModule) as (ajv: Ajv) => Ajv;
// randexp is CommonJS (module.exports = the class) with ESM-style typings; unwrap it the same way.
type RandExp = randexpModule.default;
const RandExp = ((randexpModule as any).default ?? randexpModule) as typeof randexpModule.default;

/** One shared ajv instance; schemas from servers are untrusted, so strict mode is off. */
export function createAjv(): Ajv {
  const ajv = new Ajv({ strict: false, allErrors: false, validateSchema: false });
  addFormats(ajv);
  return ajv;
}

const ajv = createAjv();
const compiled = new WeakMap<object, ValidateFunction>();
// By text too: the generators build sub-schemas afresh (resolveRefs) for every candidate value they try, and
// compiling was most of an offline draw's time (65 s of 2,400 bookshop scenarios went to Ajv's code generation).
const compiledText = new Map<string, ValidateFunction>();

/** Compiles (and caches) a validator; `$schema` is dropped so draft-07 and 2020-12 schemas both compile. */
export function validatorFor(schema: JsonSchema): ValidateFunction {
  let v = compiled.get(schema);
  if (!v) {
    const { $schema: _ignored, ...rest } = schema;
    const text = JSON.stringify(rest);
    v = compiledText.get(text);
    if (!v) {
      v = ajv.compile(rest);
      compiledText.set(text, v);
    }
    compiled.set(schema, v);
  }
  return v;
}

/** True when `value` validates against `schema` (which must be self-contained: refs resolved). */
export function validates(schema: JsonSchema, value: unknown): boolean {
  try {
    return validatorFor(schema)(value) as boolean;
  } catch {
    return false;
  }
}

const MAX_REF_DEPTH = 8;

/**
 * Inlines local `$ref`s so that every sub-schema stands alone. Recursive references are expanded up to a
 * fixed depth and then replaced by `{}` (any value), which the synthesizer treats as "omit if optional".
 */
export function resolveRefs(schema: JsonSchema): JsonSchema {
  const root = schema;
  const walk = (node: unknown, depth: number): unknown => {
    if (Array.isArray(node)) return node.map((n) => walk(n, depth));
    if (node === null || typeof node !== 'object') return node;
    const obj = node as Record<string, unknown>;
    if (typeof obj.$ref === 'string') {
      if (depth >= MAX_REF_DEPTH) return {};
      const target = resolvePointer(root, obj.$ref);
      if (target === undefined) throw new McprlError('ARG_SYNTHESIS', `unresolvable $ref ${obj.$ref}`);
      const { $ref: _r, ...siblings } = obj;
      const resolved = walk(target, depth + 1) as Record<string, unknown>;
      return Object.keys(siblings).length ? { ...resolved, ...(walk(siblings, depth) as object) } : resolved;
    }
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(obj)) {
      // Definitions are only reachable through refs; keeping them would just duplicate work.
      if (k === 'definitions' || k === '$defs') continue;
      out[k] = walk(v, depth);
    }
    return out;
  };
  return walk(schema, 0) as JsonSchema;
}

function resolvePointer(root: JsonSchema, ref: string): unknown {
  if (!ref.startsWith('#')) return undefined;
  const parts = ref.slice(1).split('/').filter(Boolean).map((p) => decodeURIComponent(p.replace(/~1/g, '/').replace(/~0/g, '~')));
  let cur: unknown = root;
  for (const p of parts) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[p];
  }
  return cur;
}

/** Synthesizes one valid arguments object for a tool's inputSchema. */
export function synthesizeArgs(inputSchema: JsonSchema, opts: SynthesisOptions): Record<string, unknown> {
  const value = synthesizeValidValue({ type: 'object', ...inputSchema }, opts);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new McprlError('ARG_SYNTHESIS', 'inputSchema does not describe an object');
  }
  return value as Record<string, unknown>;
}

/** Synthesizes a value for any schema, retrying until ajv accepts it. */
export function synthesizeValidValue(schema: JsonSchema, opts: SynthesisOptions): unknown {
  const resolved = resolveRefs(schema);
  const attempts = opts.attempts ?? 20;
  let lastError = 'no attempt made';
  for (let i = 0; i < attempts; i++) {
    try {
      const v = gen(resolved, opts, [], undefined, 0);
      if (validates(resolved, v)) return v;
      lastError = ajvMessage(resolved, v);
    } catch (err) {
      lastError = (err as Error).message;
    }
  }
  throw new McprlError('ARG_SYNTHESIS', `could not synthesize a valid value after ${attempts} attempts: ${lastError}`);
}

function ajvMessage(schema: JsonSchema, v: unknown): string {
  const validate = validatorFor(schema);
  validate(v);
  const e = validate.errors?.[0];
  return e ? `${e.instancePath || '(root)'} ${e.message ?? 'invalid'}` : 'invalid';
}

const MAX_DEPTH = 10;

function gen(schema: JsonSchema, opts: SynthesisOptions, path: string[], name: string | undefined, depth: number): unknown {
  const { rng } = opts;
  if (depth > MAX_DEPTH) throw new McprlError('ARG_SYNTHESIS', `schema nests deeper than ${MAX_DEPTH}`);

  // Discovered values first: they make tasks about real entities.
  const cands = opts.candidates?.({ name, path, schema });
  if (cands && cands.length) {
    for (const c of rng.shuffle(cands)) if (validates(schema, c)) return c;
  }

  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length) return rng.pick(schema.enum);
  if (Array.isArray(schema.allOf) && schema.allOf.length) return gen(mergeAllOf(schema), opts, path, name, depth + 1);
  const branches = (schema.anyOf ?? schema.oneOf) as JsonSchema[] | undefined;
  if (Array.isArray(branches) && branches.length) {
    const { anyOf: _a, oneOf: _o, ...base } = schema;
    const usable = branches.filter((b) => !(b && typeof b === 'object' && (b as JsonSchema).type === 'null'));
    const branch = rng.pick(usable.length ? usable : branches);
    return gen({ ...base, ...(branch as JsonSchema) }, opts, path, name, depth + 1);
  }

  switch (pickType(schema, rng)) {
    case 'object':
      return genObject(schema, opts, path, depth);
    case 'array':
      return genArray(schema, opts, path, name, depth);
    case 'integer':
      return genNumber(schema, rng, true);
    case 'number':
      // Counts, sizes and ids are whole numbers even when a schema only says "number".
      return genNumber(schema, rng, /count|quantity|size|limit|steps|index|page|depth|offset|lines|(^|_)(n|num|id|head|tail)$|Id$/i.test(name ?? ''));
    case 'boolean':
      return rng.chance(0.5);
    case 'null':
      return null;
    default:
      return genString(schema, rng, name);
  }
}

function mergeAllOf(schema: JsonSchema): JsonSchema {
  const { allOf, ...base } = schema;
  const out: JsonSchema = { ...base };
  for (const part of allOf as JsonSchema[]) {
    for (const [k, v] of Object.entries(part)) {
      if (k === 'properties') out.properties = { ...(out.properties as object), ...(v as object) };
      else if (k === 'required') out.required = [...new Set([...((out.required as string[]) ?? []), ...(v as string[])])];
      else out[k] = v;
    }
  }
  return out;
}

function pickType(schema: JsonSchema, rng: Rng): string {
  const t = schema.type;
  if (typeof t === 'string') return t;
  if (Array.isArray(t) && t.length) {
    const nonNull = t.filter((x) => x !== 'null');
    return String(rng.pick(nonNull.length ? nonNull : t));
  }
  if (schema.properties || schema.required) return 'object';
  if (schema.items || schema.prefixItems) return 'array';
  if (schema.minimum !== undefined || schema.maximum !== undefined) return 'number';
  return 'string';
}

function genObject(schema: JsonSchema, opts: SynthesisOptions, path: string[], depth: number): Record<string, unknown> {
  const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((schema.required as string[] | undefined) ?? []);
  const rate = opts.optionalRate ?? 0.5;
  const out: Record<string, unknown> = {};
  for (const [key, sub] of Object.entries(props)) {
    const isRequired = required.has(key);
    if (!isRequired) {
      // An empty schema ({}: a recursion cut or "anything") carries no meaning worth synthesizing.
      if (!sub || typeof sub !== 'object' || Object.keys(sub).length === 0) continue;
      // Deeper optional properties are included less often, so recursive schemas stay small.
      if (!opts.rng.chance(rate * Math.pow(0.5, Math.max(0, depth - 1)))) continue;
    }
    out[key] = gen(sub && typeof sub === 'object' ? sub : {}, opts, [...path, key], key, depth + 1);
  }
  // Required keys without a property schema still need a value.
  for (const key of required) if (!(key in out)) out[key] = genString({}, opts.rng, key);
  return out;
}

function genArray(schema: JsonSchema, opts: SynthesisOptions, path: string[], name: string | undefined, depth: number): unknown[] {
  const { rng } = opts;
  const tuple = (Array.isArray(schema.prefixItems) ? schema.prefixItems : Array.isArray(schema.items) ? schema.items : undefined) as
    | JsonSchema[]
    | undefined;
  if (tuple) return tuple.map((s, i) => gen(s, opts, [...path, String(i)], name, depth + 1));
  const items = (schema.items && typeof schema.items === 'object' ? schema.items : {}) as JsonSchema;
  const min = num(schema.minItems) ?? 0;
  const max = num(schema.maxItems) ?? Math.max(min, 3);
  const n = rng.int(Math.max(min, Math.min(1, max)), Math.min(max, Math.max(min, 3)));
  const out: unknown[] = [];
  const seen = new Set<string>();
  for (let tries = 0; out.length < n && tries < n * 10; tries++) {
    const v = gen(items, opts, [...path, '[]'], name, depth + 1);
    const key = JSON.stringify(v);
    // A list that names the same thing twice ("read a, a and a", a relation recorded twice in one request) makes no
    // sense even where the schema allows it; repeats are used only when the minimum length needs them.
    if (seen.has(key) && (schema.uniqueItems || tries < n * 5 || out.length >= min)) continue;
    seen.add(key);
    out.push(v);
  }
  return out;
}

function num(x: unknown): number | undefined {
  return typeof x === 'number' && Number.isFinite(x) ? x : undefined;
}

function genNumber(schema: JsonSchema, rng: Rng, integer: boolean): number {
  let lo = num(schema.minimum);
  let hi = num(schema.maximum);
  let loExclusive = false;
  let hiExclusive = false;
  // Draft 6+: exclusiveMinimum is a number; draft 4: a boolean modifying minimum.
  if (num(schema.exclusiveMinimum) !== undefined && (lo === undefined || (schema.exclusiveMinimum as number) >= lo)) {
    lo = schema.exclusiveMinimum as number;
    loExclusive = true;
  } else if (schema.exclusiveMinimum === true) loExclusive = true;
  if (num(schema.exclusiveMaximum) !== undefined && (hi === undefined || (schema.exclusiveMaximum as number) <= hi)) {
    hi = schema.exclusiveMaximum as number;
    hiExclusive = true;
  } else if (schema.exclusiveMaximum === true) hiExclusive = true;

  // Unbounded sides get a small, human-looking range.
  if (lo === undefined && hi === undefined) {
    lo = 1;
    hi = 100;
  } else if (lo === undefined) lo = hi! > 0 ? Math.max(0, hi! - 100) : hi! - 100;
  else if (hi === undefined) hi = lo + (Math.abs(lo) < 100 ? 100 : Math.abs(lo));
  const step = num(schema.multipleOf);
  const isInt = integer || (step !== undefined && Number.isInteger(step));

  const ok = (v: number) =>
    (loExclusive ? v > lo! : v >= lo!) && (hiExclusive ? v < hi! : v <= hi!) && (step === undefined || isMultiple(v, step));
  for (let i = 0; i < 50; i++) {
    let v: number;
    if (step !== undefined) {
      const kLo = Math.ceil(lo! / step);
      const kHi = Math.floor(hi! / step);
      if (kLo > kHi) break;
      v = roundTo(rng.int(kLo, Math.min(kHi, kLo + 1000)) * step);
    } else if (isInt) {
      const a = Math.ceil(lo!);
      const b = Math.floor(hi!);
      if (a > b) break;
      v = rng.int(a, b);
    } else {
      // Numbers people type: whole, or with one or two decimals.
      const raw = lo! + rng.next() * (hi! - lo!);
      v = rng.chance(0.6) ? Math.round(raw) : rng.chance(0.5) ? Math.round(raw * 10) / 10 : Math.round(raw * 100) / 100;
    }
    if (ok(v)) return v;
  }
  throw new McprlError('ARG_SYNTHESIS', `no ${isInt ? 'integer' : 'number'} satisfies the bounds of ${JSON.stringify(schema)}`);
}

function roundTo(x: number): number {
  return Math.round(x * 1e9) / 1e9;
}

function isMultiple(v: number, step: number): boolean {
  const q = v / step;
  return Math.abs(q - Math.round(q)) < 1e-9;
}

const FIRST_NAMES = ['Alex', 'Maria', 'Sam', 'Priya', 'Jonas', 'Chen', 'Fatima', 'Luca', 'Nora', 'Diego'];
const LAST_NAMES = ['Morgan', 'Silva', 'Okafor', 'Lindqvist', 'Tanaka', 'Haddad', 'Rossi', 'Novak', 'Byrne', 'Kaur'];
/** Stand-in text for a string with nothing else to go on (exported so that offline writes can refuse it). */
export const FILLER_WORDS = [
  'hello world', 'quarterly report', 'blue notebook', 'weekend trip', 'team meeting', 'garden plan',
  'research notes', 'birthday gift', 'project alpha', 'morning run', 'recipe ideas', 'reading list',
];

function genString(schema: JsonSchema, rng: Rng, name: string | undefined): string {
  const minLen = num(schema.minLength) ?? 0;
  const maxLen = num(schema.maxLength) ?? Infinity;
  const fit = (s: string): string => {
    let out = s;
    while (out.length < minLen) out += out.length ? ' ' + s : 'x';
    if (out.length < minLen) out = out.padEnd(minLen, 'x');
    return out.slice(0, Math.max(minLen, Math.min(maxLen, out.length)));
  };
  if (typeof schema.pattern === 'string') {
    const re = safeRegExp(schema.pattern);
    if (!re) throw new McprlError('ARG_SYNTHESIS', `pattern ${schema.pattern} is not a valid regular expression`);
    // A human-looking value (an email for an email pattern) beats a random string that merely matches.
    const { pattern: _p, ...plainSchema } = schema;
    const plain = genString(plainSchema, rng, name);
    if (re.test(plain) && plain.length >= minLen && plain.length <= maxLen) return plain;
    for (let i = 0; i < 20; i++) {
      const s = generateFromPattern(schema.pattern, rng);
      if (s !== undefined && re.test(s) && s.length >= minLen && s.length <= maxLen) return s;
    }
    throw new McprlError('ARG_SYNTHESIS', `cannot generate a string matching pattern ${schema.pattern}`);
  }
  const first = rng.pick(FIRST_NAMES);
  const last = rng.pick(LAST_NAMES);
  switch (schema.format) {
    case 'email':
      return fit(`${first.toLowerCase()}.${last.toLowerCase()}@example.com`);
    case 'uri':
    case 'url':
    case 'iri':
    case 'uri-reference':
      return fit(`https://example.com/${rng.pick(['docs', 'items', 'notes'])}/${rng.int(1, 99)}`);
    case 'date':
      return `20${rng.int(20, 25)}-${pad2(rng.int(1, 12))}-${pad2(rng.int(1, 28))}`;
    case 'date-time':
      return `20${rng.int(20, 25)}-${pad2(rng.int(1, 12))}-${pad2(rng.int(1, 28))}T${pad2(rng.int(0, 23))}:${pad2(rng.int(0, 59))}:00Z`;
    case 'time':
      return `${pad2(rng.int(0, 23))}:${pad2(rng.int(0, 59))}:00Z`;
    case 'uuid': {
      const hex = (n: number) => Array.from({ length: n }, () => rng.int(0, 15).toString(16)).join('');
      return `${hex(8)}-${hex(4)}-4${hex(3)}-a${hex(3)}-${hex(12)}`;
    }
    case 'hostname':
      return fit(`${rng.pick(['api', 'www', 'mail'])}.example.com`);
    case 'ipv4':
      return `192.168.${rng.int(0, 255)}.${rng.int(1, 254)}`;
    case 'ipv6':
      return `2001:db8::${rng.int(1, 65535).toString(16)}`;
  }
  const n = (name ?? '').toLowerCase();
  let s: string;
  if (/email/.test(n)) s = `${first.toLowerCase()}.${last.toLowerCase()}@example.com`;
  else if (/(^|_)name$|^name|author|customer|person|user/.test(n)) s = `${first} ${last}`;
  else if (/url|uri|link/.test(n)) s = `https://example.com/${rng.pick(['docs', 'items', 'notes'])}/${rng.int(1, 99)}`;
  else if (/country/.test(n)) s = rng.pick(['Japan', 'France', 'Brazil', 'Canada', 'India']);
  else if (/city|location/.test(n)) s = rng.pick(['Paris', 'Tokyo', 'Lagos', 'Lima', 'Oslo']);
  else if (/date/.test(n)) s = `20${rng.int(20, 25)}-${pad2(rng.int(1, 12))}-${pad2(rng.int(1, 28))}`;
  else if (/(^|_)id$|^id/.test(n)) s = `${n.replace(/_?id$/, '') || 'item'}-${rng.int(1, 99)}`;
  else s = rng.pick(FILLER_WORDS);
  return fit(s);
}

function pad2(n: number): string {
  return String(n).padStart(2, '0');
}

function safeRegExp(p: string): RegExp | undefined {
  try {
    return new RegExp(p, 'u');
  } catch {
    try {
      return new RegExp(p);
    } catch {
      return undefined;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Strings for a pattern come from randexp, driven by the caller's seeded Rng so that a seed gives the same
// arguments every time. Unbounded quantifiers (* + {n,}) repeat at most 3 times more than their minimum.

/**
 * The characters `.` and negated classes draw from, tried in turn until a string matches: readable ones first
 * (an id pattern like `^[^\s]{3}$` then yields "aB3" rather than "#~`"), then printable ASCII, then the whole
 * Basic Multilingual Plane for patterns written in other scripts. Each is a list of inclusive code point ranges.
 */
const CHARACTER_UNIVERSES: [number, number][][] = [
  [[0x30, 0x39], [0x41, 0x5a], [0x61, 0x7a], [0x20, 0x20], [0x2d, 0x2e], [0x5f, 0x5f]],
  [[0x20, 0x7e]],
  [[0x20, 0x7e], [0xa0, 0xd7ff], [0xe000, 0xfffd]],
];
const TRIES_PER_UNIVERSE = 4;

/**
 * Generates a string matching `pattern`, or undefined when none was found (an invalid pattern, or one randexp
 * cannot honour, such as a lookahead). Every string returned has been checked against the pattern.
 */
export function generateFromPattern(pattern: string, rng: Rng): string | undefined {
  const re = safeRegExp(pattern);
  if (!re) return undefined;
  for (const universe of CHARACTER_UNIVERSES) {
    let gen: RandExp;
    try {
      gen = new RandExp(pattern);
    } catch {
      return undefined; // randexp's parser refuses a pattern JavaScript accepts (e.g. \p{…} classes)
    }
    gen.max = 3;
    gen.randInt = (a: number, b: number) => rng.int(a, b);
    const range = gen.defaultRange.subtract(0, 0x10ffff);
    for (const [lo, hi] of universe) range.add(lo, hi);
    for (let i = 0; i < TRIES_PER_UNIVERSE; i++) {
      const s = gen.gen();
      if (re.test(s)) return s;
    }
  }
  return undefined;
}
