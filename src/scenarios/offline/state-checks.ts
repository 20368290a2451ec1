/**
 * State checks for tasks that write: the read-only calls that may show a change, what may show it, and the check
 * that holds after the write and fails on an untouched server.
 */
import type { ToolInfo } from '../../mcp/index.js';
import type { JsonSchema } from '../json-schema-args.js';
import { validates } from '../json-schema-args.js';
import { numberAt, stateShows, type StateCheck } from '../scenario.js';
import { UNSTABLE_KEYS } from './answer.js';
import { entityKey, requiredNames, SEARCH_NAMES } from './arguments.js';
import type { IsolatedReplay } from './replay.js';
import { numericLeaves, parseJson, scalarArgValues, stringLeaves } from './values.js';
import { isIdName } from './wording.js';

/** A read-only call that may show a write: the reader of a state check. */
export interface StateReader {
  tool: string;
  args: Record<string, unknown>;
}

/**
 * Read-only calls that may show a write of these values: each value as a name-like argument or a search, and the
 * tools that need no argument (a whole graph, a listing). `tools`: the read-only tools, schemas resolved.
 */
export function stateReaders(tools: readonly ToolInfo[], values: string[]): StateReader[] {
  const out: StateReader[] = [];
  const whole: StateReader[] = [];
  for (const t of tools) {
    const req = requiredNames(t);
    const props = (t.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
    if (req.length === 0 && validates(t.inputSchema, {})) whole.push({ tool: t.name, args: {} });
    if (req.length !== 1) continue;
    const p = props[req[0]];
    if (!p) continue;
    for (const v of new Set(values)) {
      const args = { [req[0]]: p.type === 'array' ? [v] : v };
      if ((entityKey(req[0]) || isIdName(req[0]) || SEARCH_NAMES.test(req[0])) && validates(t.inputSchema, args)) out.push({ tool: t.name, args });
    }
  }
  return [...out.slice(0, 24), ...whole.slice(0, 4)];
}

/** What may show that a write of `args` happened. */
export interface WriteEvidence {
  /** The strings the write was given. */
  strings: string[];
  /** Those, and a path's base name (a listing names files by it): what a reader may show, or no longer show. */
  values: string[];
  /** The new ones (no discovery showed them), with base names: what a reader must come to show. */
  fresh: string[];
  /** What the readers are asked about: the strings, and each path's folder. */
  readerValues: string[];
}

export function writeEvidence(args: unknown, isKnown: (v: string) => boolean): WriteEvidence {
  const strings = [...new Set(stringLeaves(args))];
  const base = (v: string) => (v.includes('/') ? [v.slice(v.lastIndexOf('/') + 1)] : []);
  return {
    strings,
    values: strings.flatMap((v) => [v, ...base(v)]),
    fresh: strings.filter((v) => v.length >= 3 && !isKnown(v)).flatMap((v) => [v, ...base(v)]),
    readerValues: [...strings, ...strings.flatMap((v) => (v.includes('/') ? [v.slice(0, v.lastIndexOf('/')) || '/'] : []))],
  };
}

/** The first reader whose state tells the change apart (see stateChange), as a state check. */
export function stateCheckOf(readers: readonly StateReader[], r: IsolatedReplay, evidence: WriteEvidence): StateCheck | undefined {
  for (let i = 0; i < readers.length; i++) {
    const b = r.before[i]!;
    const a = r.after[i]!;
    if (b.isError || a.isError || b.text !== r.again[i]!.text) continue;
    const state = stateChange(readers[i], b.text, a.text, evidence.values, evidence.fresh);
    if (state) return state;
  }
  return undefined;
}

/**
 * A state check that tells the change apart: a written value the reader now shows (state_contains), a number
 * that moved (state_number: a stock level, a count of orders), or a value it no longer shows (state_absent: a
 * deleted entity, a moved file). It must hold after the write and fail on the untouched state.
 */
function stateChange(reader: { tool: string; args: Record<string, unknown> }, before: string, after: string, strings: string[], fresh: string[]): StateCheck | undefined {
  const given = scalarArgValues(reader.args);
  const options: StateCheck[] = [];
  for (const v of fresh) if (!given.has(v.toLowerCase())) options.push({ kind: 'state_contains', ...reader, value: v });
  // A value seen elsewhere that this reader comes to show (a note another entity has, added to this one).
  for (const v of strings) if (v.length >= 3 && !fresh.includes(v) && !given.has(v.toLowerCase())) options.push({ kind: 'state_contains', ...reader, value: v });
  for (const v of strings) if (v.length >= 3 && !given.has(v.toLowerCase())) options.push({ kind: 'state_absent', ...reader, value: v });
  for (const { path, value } of numericLeaves(parseJson(after))) {
    if (UNSTABLE_KEYS.test(path[path.length - 1] ?? '') || numberAt(before, path) === undefined) continue;
    options.push({ kind: 'state_number', ...reader, path, value });
  }
  return options.find((c) => stateShows(c, { text: after, is_error: false }) && !stateShows(c, { text: before, is_error: false }));
}
