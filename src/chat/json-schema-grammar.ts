/**
 * JSON Schemas compiled to the grammar's value nodes (see tool-call-grammar.ts for what is enforced, relaxed or
 * refused): objects, arrays, strings (with pattern-automaton.ts for `pattern`), numbers and integers with their
 * bounds, literals (enums, consts, booleans, null) and unions told apart by their first byte. The compiler
 * throws UnsupportedSchema for structure it cannot express; callers decide whether that relaxes or refuses.
 */

import { PatternAutomaton, UnsupportedPattern } from './pattern-automaton.js';

/** UTF-8 bytes of a string: the grammar walks bytes. */
export const enc = (s: string): Uint8Array => new TextEncoder().encode(s);

// ---------------------------------------------------------------------------------------------------------
// Compiled schemas

export interface Prop { name: string; enc: Uint8Array; node: SchemaNode; required: boolean }
export interface NumBounds { lo: number; loEx: boolean; hi: number; hiEx: boolean }

export type SchemaNode =
  | { id: number; t: 'any' }
  | { id: number; t: 'obj'; props: Prop[]; requiredCount: number; extra: SchemaNode | null }
  | { id: number; t: 'arr'; items: SchemaNode; min: number; max: number }
  | { id: number; t: 'str'; min: number; max: number; pattern?: PatternAutomaton }
  | ({ id: number; t: 'num'; int: boolean } & NumBounds)
  | { id: number; t: 'lit'; values: Uint8Array[] }
  | { id: number; t: 'union'; alts: SchemaNode[] };

/** A schema feature the grammar cannot enforce; the tool's arguments fall back to any JSON object. */
export class UnsupportedSchema extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnsupportedSchema';
  }
}

const ANNOTATIONS = new Set(['description', 'title', 'default', 'examples', 'example', '$schema', '$id', '$comment', 'deprecated', 'readOnly', 'writeOnly', '$defs', 'definitions']);
const RELAXED = new Set(['format', 'multipleOf', 'uniqueItems', 'minProperties', 'maxProperties', 'propertyNames', 'contentEncoding', 'contentMediaType', 'dependentRequired', 'dependencies']);
const UNSUPPORTED = new Set(['allOf', 'not', 'if', 'then', 'else', 'patternProperties', 'prefixItems', 'additionalItems', 'contains', 'minContains', 'maxContains', 'dependentSchemas', 'unevaluatedProperties', 'unevaluatedItems', '$dynamicRef', '$recursiveRef']);

/** Compiles one schema; `relaxed` collects the keywords it could not enforce. */
export class SchemaCompiler {
  readonly relaxed = new Set<string>();
  private readonly refs: string[] = [];
  /** ids: shared by the compilers of one grammar, so that every node of it has its own (state keys use them). */
  constructor(
    private readonly root: Record<string, unknown>,
    private readonly ids: { next: number },
  ) {}

  node<T extends Omit<SchemaNode, 'id'>>(n: T): T & { id: number } {
    return { ...n, id: this.ids.next++ };
  }

  compile(schema: unknown): SchemaNode {
    if (schema === true || schema === undefined) return this.node({ t: 'any' as const });
    if (schema === false) throw new UnsupportedSchema('a `false` schema');
    if (!schema || typeof schema !== 'object' || Array.isArray(schema)) throw new UnsupportedSchema(`schema ${JSON.stringify(schema)}`);
    const s = schema as Record<string, unknown>;
    for (const k of Object.keys(s)) {
      if (UNSUPPORTED.has(k)) throw new UnsupportedSchema(k);
      if (RELAXED.has(k)) this.relaxed.add(k);
    }
    // A pattern is enforced by string nodes (typed below); an enum, a const or an untyped schema leaves it relaxed.
    const patternRelaxed = () => {
      if (s.pattern !== undefined) this.relaxed.add('pattern');
    };
    if (typeof s.$ref === 'string') {
      patternRelaxed();
      return this.ref(s.$ref);
    }
    if (s.const !== undefined || Array.isArray(s.enum)) {
      patternRelaxed();
      return this.lit(s.const !== undefined ? [s.const] : (s.enum as unknown[]));
    }
    for (const key of ['anyOf', 'oneOf'] as const) {
      if (Array.isArray(s[key])) {
        // Sibling keywords (a shared description, say) are annotations here; a shared type is applied below.
        const { [key]: alts, ...rest } = s;
        const base = Object.keys(rest).some((k) => !ANNOTATIONS.has(k)) ? rest : {};
        return this.union((alts as unknown[]).map((a) => this.compile({ ...base, ...(a as object) })));
      }
    }
    let types: string[];
    if (Array.isArray(s.type)) types = s.type as string[];
    else if (typeof s.type === 'string') types = [s.type];
    else if (s.properties || s.additionalProperties !== undefined || s.required) types = ['object'];
    else if (s.items) types = ['array'];
    else {
      patternRelaxed();
      return this.node({ t: 'any' as const });
    }
    if (s.nullable === true && !types.includes('null')) types = [...types, 'null'];
    // integer ⊂ number: `["integer", "number"]` is a number.
    if (types.includes('number')) types = types.filter((t) => t !== 'integer');
    return this.union(types.map((t) => this.typed(t, s)));
  }

  private typed(type: string, s: Record<string, unknown>): SchemaNode {
    switch (type) {
      case 'object': {
        const props = Object.entries((s.properties ?? {}) as Record<string, unknown>);
        const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
        for (const r of required) if (!props.some(([k]) => k === r)) throw new UnsupportedSchema(`required property ${JSON.stringify(r)} has no schema`);
        const compiled: Prop[] = props.map(([name, sub]) => ({ name, enc: enc(JSON.stringify(name)), node: this.compile(sub), required: required.has(name) }));
        // Declared properties only (`properties: {}` declares none); an object schema without `properties`
        // takes any keys, with values of its additionalProperties schema (any value by default).
        const ap = s.additionalProperties;
        const extra = s.properties !== undefined || ap === false ? null : ap === undefined || ap === true ? this.node({ t: 'any' as const }) : this.compile(ap);
        if (compiled.length > 30) throw new UnsupportedSchema('an object with more than 30 properties');
        return this.node({ t: 'obj' as const, props: compiled, requiredCount: required.size, extra });
      }
      case 'array': {
        if (Array.isArray(s.items)) throw new UnsupportedSchema('tuple `items`');
        const min = typeof s.minItems === 'number' ? s.minItems : 0;
        const max = typeof s.maxItems === 'number' ? s.maxItems : Infinity;
        if (min > max) throw new UnsupportedSchema('minItems > maxItems');
        return this.node({ t: 'arr' as const, items: this.compile(s.items), min, max });
      }
      case 'string': {
        const min = typeof s.minLength === 'number' ? s.minLength : 0;
        const max = typeof s.maxLength === 'number' ? s.maxLength : Infinity;
        if (min > max) throw new UnsupportedSchema('minLength > maxLength');
        const pattern = this.pattern(s.pattern, min, max);
        return this.node({ t: 'str' as const, min, max, ...(pattern ? { pattern } : {}) });
      }
      case 'integer':
      case 'number':
        return this.node({ t: 'num' as const, int: type === 'integer', ...bounds(s, type === 'integer') });
      case 'boolean':
        return this.lit([true, false]);
      case 'null':
        return this.lit([null]);
      default:
        throw new UnsupportedSchema(`type ${JSON.stringify(type)}`);
    }
  }

  /** The automaton of a string's pattern, or undefined (none, or relaxed because it cannot be enforced). */
  private pattern(source: unknown, min: number, max: number): PatternAutomaton | undefined {
    if (source === undefined) return undefined;
    let rx: PatternAutomaton;
    try {
      if (typeof source !== 'string') throw new UnsupportedPattern('a pattern that is not a string');
      rx = new PatternAutomaton(source, min, max);
    } catch (err) {
      if (!(err instanceof UnsupportedPattern)) throw err;
      this.relaxed.add('pattern');
      return undefined;
    }
    if (!rx.live(rx.start, 0)) throw new UnsupportedSchema(`pattern ${JSON.stringify(source)}: no string within the length bounds matches it`);
    return rx;
  }

  private lit(values: unknown[]): SchemaNode {
    if (values.length === 0) throw new UnsupportedSchema('an empty enum');
    return this.node({ t: 'lit' as const, values: [...new Set(values.map((v) => JSON.stringify(v)))].map(enc) });
  }

  private union(alts: SchemaNode[]): SchemaNode {
    const flat = alts.flatMap((a) => (a.t === 'union' ? a.alts : [a]));
    if (flat.length === 1) return flat[0];
    // Alternatives must be told apart by their first byte: that keeps the automaton deterministic.
    const owner = new Map<number, number>();
    flat.forEach((a, i) => {
      for (const b of firstBytes(a)) {
        if (owner.has(b) && owner.get(b) !== i) {
          // Two enums (or an enum and a string) starting alike merge into one enum when both are literals.
          throw new UnsupportedSchema('a union of alternatives that start with the same character');
        }
        owner.set(b, i);
      }
    });
    return this.node({ t: 'union' as const, alts: flat });
  }

  private ref(ref: string): SchemaNode {
    const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref);
    if (!m) throw new UnsupportedSchema(`$ref ${ref}`);
    if (this.refs.includes(ref)) throw new UnsupportedSchema(`recursive $ref ${ref}`);
    const defs = this.root[m[1]] as Record<string, unknown> | undefined;
    const target = defs?.[m[2].replace(/~1/g, '/').replace(/~0/g, '~')];
    if (target === undefined) throw new UnsupportedSchema(`$ref ${ref} not found`);
    this.refs.push(ref);
    try {
      return this.compile(target);
    } finally {
      this.refs.pop();
    }
  }
}

function bounds(s: Record<string, unknown>, int: boolean): NumBounds {
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
  let lo = -Infinity, loEx = false, hi = Infinity, hiEx = false;
  const min = num(s.minimum), max = num(s.maximum);
  if (min !== undefined) lo = min;
  if (max !== undefined) hi = max;
  // Draft 4 writes exclusiveMinimum: true next to minimum; later drafts give the bound itself.
  if (s.exclusiveMinimum === true && min !== undefined) loEx = true;
  if (s.exclusiveMaximum === true && max !== undefined) hiEx = true;
  const exMin = num(s.exclusiveMinimum), exMax = num(s.exclusiveMaximum);
  if (exMin !== undefined && exMin >= lo) { lo = exMin; loEx = true; }
  if (exMax !== undefined && exMax <= hi) { hi = exMax; hiEx = true; }
  if (int) {
    // Integer bounds as inclusive integers: a prefix is then viable exactly when an integer in range extends it.
    lo = loEx ? Math.floor(lo) + 1 : Math.ceil(lo);
    hi = hiEx ? Math.ceil(hi) - 1 : Math.floor(hi);
    loEx = hiEx = false;
  }
  if (lo > hi || (lo === hi && (loEx || hiEx))) throw new UnsupportedSchema('a number range with no value in it');
  return { lo, loEx, hi, hiEx };
}

/** The bytes a value of this node can start with. */
export function firstBytes(n: SchemaNode): number[] {
  switch (n.t) {
    case 'any': return [0x7b, 0x5b, 0x22, 0x2d, ...'0123456789tfn'.split('').map((c) => c.charCodeAt(0))];
    case 'obj': return [0x7b];
    case 'arr': return [0x5b];
    case 'str': return [0x22];
    case 'num': return [0x2d, ...'0123456789'.split('').map((c) => c.charCodeAt(0))];
    case 'lit': return [...new Set(n.values.map((v) => v[0]))];
    case 'union': return n.alts.flatMap(firstBytes);
  }
}
