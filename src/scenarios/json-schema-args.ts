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
import type { Rng } from '../util/rng.js';
import { McprlError } from '../util/errors.js';

export type JsonSchema = Record<string, unknown>;

/** The schema cannot be satisfied by this synthesizer (e.g. an unsupported pattern or contradictory bounds). */
export class ArgSynthesisError extends McprlError<'ARG_SYNTHESIS'> {
  constructor(message: string) {
    super('ARG_SYNTHESIS', message);
  }
}

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

/** One shared ajv instance; schemas from servers are untrusted, so strict mode is off. */
export function createAjv(): Ajv {
  const ajv = new Ajv({ strict: false, allErrors: false, validateSchema: false });
  addFormats(ajv);
  return ajv;
}

const ajv = createAjv();
const compiled = new WeakMap<object, ValidateFunction>();

/** Compiles (and caches) a validator; `$schema` is dropped so draft-07 and 2020-12 schemas both compile. */
export function validatorFor(schema: JsonSchema): ValidateFunction {
  let v = compiled.get(schema);
  if (!v) {
    const { $schema: _ignored, ...rest } = schema;
    v = ajv.compile(rest);
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
      if (target === undefined) throw new ArgSynthesisError(`unresolvable $ref ${obj.$ref}`);
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
    throw new ArgSynthesisError('inputSchema does not describe an object');
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
  throw new ArgSynthesisError(`could not synthesize a valid value after ${attempts} attempts: ${lastError}`);
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
  if (depth > MAX_DEPTH) throw new ArgSynthesisError(`schema nests deeper than ${MAX_DEPTH}`);

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
      return genNumber(schema, rng, /count|quantity|size|limit|steps|index|page|(^|_)(n|num|id)$|Id$/i.test(name ?? ''));
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
    if (schema.uniqueItems && seen.has(key)) continue;
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
  throw new ArgSynthesisError(`no ${isInt ? 'integer' : 'number'} satisfies the bounds of ${JSON.stringify(schema)}`);
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
const WORDS = [
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
    if (!re) throw new ArgSynthesisError(`pattern ${schema.pattern} is not a valid regular expression`);
    // A human-looking value (an email for an email pattern) beats a random string that merely matches.
    const { pattern: _p, ...plainSchema } = schema;
    const plain = genString(plainSchema, rng, name);
    if (re.test(plain) && plain.length >= minLen && plain.length <= maxLen) return plain;
    for (let i = 0; i < 20; i++) {
      const s = generateFromPattern(schema.pattern, rng);
      if (s !== undefined && re.test(s) && s.length >= minLen && s.length <= maxLen) return s;
    }
    throw new ArgSynthesisError(`cannot generate a string matching pattern ${schema.pattern}`);
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
  else s = rng.pick(WORDS);
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
// A small generator for the regular expressions schemas use: literals, escapes (\d \w \s and their negations),
// character classes with ranges and negation, '.', groups with alternation, and the quantifiers * + ? {n}
// {n,} {n,m}. Lookarounds and backreferences are not supported (the caller then reports the schema).

type Node =
  | { t: 'chars'; set: string[] }
  | { t: 'seq'; items: { node: Node; min: number; max: number }[] }
  | { t: 'alt'; options: Node[] };

const DIGITS = '0123456789'.split('');
const LOWER = 'abcdefghijklmnopqrstuvwxyz'.split('');
const UPPER = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ'.split('');
const WORD = [...LOWER, ...UPPER, ...DIGITS, '_'];
const PRINTABLE = [...LOWER, ...DIGITS, ...UPPER, '-', '_', '.'];
const SPACE = [' '];

/** Generates a string matching `pattern` (anchors are honoured by construction), or undefined. */
export function generateFromPattern(pattern: string, rng: Rng): string | undefined {
  let ast: Node;
  try {
    const p = new PatternParser(pattern);
    ast = p.parseAlt();
    if (p.i < pattern.length) return undefined;
  } catch {
    return undefined;
  }
  return emit(ast, rng);
}

function emit(node: Node, rng: Rng): string {
  if (node.t === 'chars') return node.set.length ? rng.pick(node.set) : '';
  if (node.t === 'alt') return emit(rng.pick(node.options), rng);
  let s = '';
  for (const { node: n, min, max } of node.items) {
    const count = rng.int(min, max);
    for (let i = 0; i < count; i++) s += emit(n, rng);
  }
  return s;
}

class PatternParser {
  i = 0;
  constructor(private readonly src: string) {}

  parseAlt(): Node {
    const options: Node[] = [this.parseSeq()];
    while (this.src[this.i] === '|') {
      this.i++;
      options.push(this.parseSeq());
    }
    return options.length === 1 ? options[0] : { t: 'alt', options };
  }

  parseSeq(): Node {
    const items: { node: Node; min: number; max: number }[] = [];
    while (this.i < this.src.length && this.src[this.i] !== '|' && this.src[this.i] !== ')') {
      const c = this.src[this.i];
      if (c === '^' || c === '$') {
        this.i++;
        continue;
      }
      const atom = this.parseAtom();
      const [min, max] = this.parseQuantifier();
      items.push({ node: atom, min, max });
    }
    return { t: 'seq', items };
  }

  parseQuantifier(): [number, number] {
    const c = this.src[this.i];
    let q: [number, number] = [1, 1];
    if (c === '*') q = [0, 3];
    else if (c === '+') q = [1, 4];
    else if (c === '?') q = [0, 1];
    else if (c === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(this.src.slice(this.i));
      if (!m) return q;
      const lo = Number(m[1]);
      const hi = m[2] === undefined ? lo : m[3] === '' ? lo + 3 : Number(m[3]);
      this.i += m[0].length;
      if (this.src[this.i] === '?') this.i++;
      return [lo, hi];
    } else return q;
    this.i++;
    if (this.src[this.i] === '?') this.i++; // lazy modifier: irrelevant for generation
    return q;
  }

  parseAtom(): Node {
    const c = this.src[this.i++];
    if (c === '(') {
      if (this.src[this.i] === '?') {
        if (this.src.slice(this.i, this.i + 2) === '?:') this.i += 2;
        else if (this.src[this.i + 1] === '<' && /[A-Za-z]/.test(this.src[this.i + 2] ?? '')) {
          this.i = this.src.indexOf('>', this.i) + 1; // named group
        } else throw new Error('lookaround');
      }
      const inner = this.parseAlt();
      if (this.src[this.i++] !== ')') throw new Error('unbalanced group');
      return inner;
    }
    if (c === '[') return this.parseClass();
    if (c === '.') return { t: 'chars', set: PRINTABLE };
    if (c === '\\') return { t: 'chars', set: this.parseEscape(false) };
    return { t: 'chars', set: [c] };
  }

  parseEscape(inClass: boolean): string[] {
    const e = this.src[this.i++];
    switch (e) {
      case 'd':
        return DIGITS;
      case 'w':
        return WORD;
      case 's':
        return SPACE;
      case 'D':
        return [...LOWER, ...UPPER];
      case 'W':
        return ['-', '.', ' '];
      case 'S':
        return PRINTABLE;
      case 'n':
        return ['\n'];
      case 't':
        return ['\t'];
      case 'b':
        if (inClass) return ['\b'];
        throw new Error('word boundary');
      default:
        if (/[1-9]/.test(e)) throw new Error('backreference');
        return [e];
    }
  }

  parseClass(): Node {
    let negate = false;
    if (this.src[this.i] === '^') {
      negate = true;
      this.i++;
    }
    const set = new Set<string>();
    let first = true;
    while (this.i < this.src.length && (this.src[this.i] !== ']' || first)) {
      first = false;
      let chars: string[];
      if (this.src[this.i] === '\\') {
        this.i++;
        chars = this.parseEscape(true);
      } else chars = [this.src[this.i++]];
      if (chars.length === 1 && this.src[this.i] === '-' && this.src[this.i + 1] !== ']' && this.i + 1 < this.src.length) {
        this.i++;
        let endChar: string;
        if (this.src[this.i] === '\\') {
          this.i++;
          endChar = this.parseEscape(true)[0];
        } else endChar = this.src[this.i++];
        for (let code = chars[0].charCodeAt(0); code <= endChar.charCodeAt(0); code++) set.add(String.fromCharCode(code));
      } else for (const ch of chars) set.add(ch);
    }
    if (this.src[this.i++] !== ']') throw new Error('unterminated class');
    if (!negate) return { t: 'chars', set: [...set] };
    return { t: 'chars', set: PRINTABLE.filter((ch) => !set.has(ch)) };
  }
}
