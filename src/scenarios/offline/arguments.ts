/**
 * Arguments from a tool's schema: what names tell about a parameter, the values some always get (the least
 * duration, a data: URI), what discovery may call with no entity known, and the text or paths an edit or a
 * search is given from what is there.
 */
import type { ToolInfo } from '../../mcp/index.js';
import type { Rng } from '../../util/rng.js';
import { resolveRefs, validates, type JsonSchema } from '../json-schema-args.js';
import type { Scalar } from './types.js';
import { isPlainObject } from './values.js';
import { singular, words } from './wording.js';

/** Parameters that take search text (discovery gives them an empty one). */
export const SEARCH_NAMES = /^(q|query|search|keyword|keywords|term|terms|text|filter|prefix)$/i;

/** Parameters that name an existing thing to act on (a file to move or delete). */
export const REF_NAMES = /^(source|src|from_?path|old_?path)$/i;
/** Parameters that take a glob (server-filesystem's search_files `pattern`): built from discovered file names. */
export const GLOB_NAMES = /^(pattern|glob|glob_?pattern|file_?pattern|include)$/i;
/** Parameters that take text to be replaced (an edit's `oldText`): a line of the content discovered for the path. */
export const OLD_TEXT_NAMES = /^(old|original|search|find|from|match)_?(text|string|str|content|line|value)$/i;
/** Parameters that take the text that replaces another (an edit's `newText`). */
export const NEW_TEXT_NAMES = /^(new|replacement)_?(text|string|str|content|line|value)$/i;
/** Parameters that take the text a write puts in a file (write_file's `content`), beside its path. */
export const FILE_TEXT_NAMES = /^(content|contents|text|body)$/i;
/** Parameters that name a new thing (where a file is moved or written to). */
export const NEW_PATH_NAMES = /^(destination|dest|target|to_?path|new_?path)$/i;
/** Keys whose values name an entity, so that they are worth feeding back as arguments of other tools. */
export const ENTITY_KEYS = new Set(['id', 'isbn', 'sku', 'key', 'name', 'path', 'uri', 'url', 'email', 'slug', 'handle', 'username', 'filename']);

/** The last word of a parameter name, singular: "names" → "name", "entityName" → "name", "paths" → "path". */
export function entityKey(param: string): string | undefined {
  const w = singular(words(param).pop() ?? '');
  return ENTITY_KEYS.has(w) ? w : undefined;
}

/** Words of a tool's name that say it is about folders (create_directory, list_directory). */
export const FOLDER_WORDS = /\b(director(y|ies)|folders?|dirs?)\b/;

/** Files a tool that reads media is given first (and a tool that reads text is not, when there are others). */
export const MEDIA_FILE = /\.(png|jpe?g|gif|webp|bmp|ico|tiff?|mp3|wav|ogg|oga|flac|m4a|aac|mp4|webm)$/i;

/** Arguments that make a call take time (a duration, a number of steps): given the least the schema allows. */
export const DURATION_NAMES = /^(duration|delay|sleep|wait|interval|steps|iterations|rounds|seconds|secs)(_?(ms|s|secs?|seconds))?$|^(duration|delay|sleep|wait)_?\w*$/i;

/** A small text as a data: URI, for an argument that takes the URL or data URI of content to fetch. */
export const DATA_URI = 'data:text/plain;base64,' + Buffer.from('hello world\n').toString('base64');

/** The least a numeric schema allows (1 when it sets no minimum). */
export function leastAmount(schema: JsonSchema): number {
  if (typeof schema.minimum === 'number') return schema.minimum;
  if (typeof schema.exclusiveMinimum === 'number') return schema.type === 'integer' ? Math.floor(schema.exclusiveMinimum) + 1 : schema.exclusiveMinimum + 1;
  return 1;
}

/**
 * Values an argument gets whatever was discovered: the least duration or number of steps (a long-running
 * operation then ends within the call timeout), and a data: URI for content to fetch (no network is needed).
 */
export function fixedCandidates(name: string, schema: JsonSchema): unknown[] | undefined {
  if ((schema.type === 'number' || schema.type === 'integer') && DURATION_NAMES.test(name)) return [leastAmount(schema)];
  if (schema.type === 'string' && (schema.format === 'uri' || schema.format === 'url') && /\bdata uri\b/i.test(String(schema.description ?? ''))) return [DATA_URI];
  return undefined;
}

/**
 * `args` with every top-level argument that has a fixed value (see fixedCandidates) set to it, optional ones too:
 * left out, the server's default applies (a 10-second operation, a URL on the network).
 */
export function withFixed(schema: JsonSchema, args: Record<string, unknown>): Record<string, unknown> {
  const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const out = { ...args };
  for (const [k, s] of Object.entries(props)) {
    const fixed = fixedCandidates(k, s);
    if (fixed && !(k in out)) out[k] = fixed[0];
  }
  return validates(schema, out) ? out : args;
}

/** What a tool's path argument names: a folder (list_directory, directory_tree, search_files), a file, or either. */
export function pathKind(tool: ToolInfo): 'folder' | 'file' | undefined {
  const name = words(tool.name).join(' ');
  if (FOLDER_WORDS.test(name) || /\btree\b/.test(name)) return 'folder';
  if (/\bsearch\b/.test(name) && hasKey(tool.inputSchema, GLOB_NAMES)) return 'folder';
  if (/\b(read|file|files|media|text)\b/.test(name)) return 'file';
  return undefined;
}

/**
 * Globs that match discovered files: each file's extension (`*.md`, `**\/*.md`) and its base name. A synthesized
 * pattern matches nothing; these match what is there.
 */
export function globsOf(paths: readonly Scalar[]): string[] {
  const out = new Set<string>();
  for (const p of paths) {
    if (typeof p !== 'string') continue;
    const base = p.slice(p.lastIndexOf('/') + 1);
    const ext = /\.([A-Za-z0-9]{1,8})$/.exec(base)?.[1];
    if (!ext) continue;
    out.add(`*.${ext}`);
    out.add(`**/*.${ext}`);
    out.add(base);
  }
  return [...out];
}

/** Whether a schema has a property whose name matches, however deep. */
export function hasKey(schema: JsonSchema, re: RegExp, depth = 0): boolean {
  if (depth > 6 || !isPlainObject(schema)) return false;
  const props = isPlainObject(schema.properties) ? (schema.properties as Record<string, JsonSchema>) : {};
  if (Object.keys(props).some((k) => re.test(k))) return true;
  return [...Object.values(props), schema.items as JsonSchema].some((x) => x !== undefined && hasKey(x, re, depth + 1));
}

/** The smallest amounts a numeric schema allows (1, 2, 3 when it sets no minimum). */
export function smallAmounts(schema: JsonSchema): number[] {
  const min = typeof schema.minimum === 'number' ? schema.minimum : typeof schema.exclusiveMinimum === 'number' ? schema.exclusiveMinimum + 1 : 1;
  const lo = Math.ceil(Math.max(min, 1));
  return [lo, lo + 1, lo + 2];
}

/** The lines of a text that occur in it once, with letters and of a length a task can quote. */
export function uniqueLines(text: string): string[] {
  const lines = text.split('\n').map((l) => l.replace(/\s+$/, ''));
  return lines.filter((l, i) => l.trim().length >= 4 && l.length <= 80 && /[A-Za-z]/.test(l) && lines.indexOf(l) === i && lines.lastIndexOf(l) === i && text.split(l).length === 2);
}

/**
 * Text to replace, taken from what is there: every list of edits keeps as many items as it must (one, or its
 * minItems), and each item's old-text field (`oldText`) becomes a distinct line of the file.
 */
export function withOldText(args: Record<string, unknown>, lines: string[], rng: Rng): Record<string, unknown> {
  const pool = rng.shuffle(lines);
  const fill = (v: unknown): unknown => {
    if (Array.isArray(v) && v.some((x) => isPlainObject(x) && Object.keys(x).some((k) => OLD_TEXT_NAMES.test(k)))) return v.slice(0, 1).map(fill);
    if (!isPlainObject(v)) return v;
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, OLD_TEXT_NAMES.test(k) && typeof x === 'string' ? (pool.shift() ?? x) : fill(x)]));
  };
  return fill(args) as Record<string, unknown>;
}

export function requiredNames(tool: ToolInfo): string[] {
  return ((tool.inputSchema.required as string[] | undefined) ?? []).filter((n) => typeof n === 'string');
}

export function safeResolve(schema: Record<string, unknown>): Record<string, unknown> {
  try {
    return resolveRefs(schema);
  } catch {
    return schema;
  }
}

/** Argument sets for discovery: no required entity, so they can run before anything is known. */
export function discoveryArgs(tool: ToolInfo): Record<string, unknown>[] {
  const props = (tool.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
  const required = requiredNames(tool);
  const base: Record<string, unknown> = {};
  // Ask for as many results as allowed, in the least time.
  for (const [k, s] of Object.entries(props)) {
    const fixed = fixedCandidates(k, s);
    if (fixed && typeof fixed[0] === 'number') base[k] = fixed[0];
    if (/^(max|limit|count|top|page_?size|per_?page|n|num|k)(_|$)|max_?results|limit$/i.test(k) && typeof s.maximum === 'number') base[k] = s.maximum;
  }
  for (const r of required) {
    const s = props[r];
    if (!s) return [];
    if (SEARCH_NAMES.test(r) && (s.type === 'string' || s.type === undefined) && !s.pattern && !(typeof s.minLength === 'number' && s.minLength > 0)) base[r] = '';
    else if (Array.isArray(s.enum)) base[r] = s.enum[0];
    else if (!(r in base)) return []; // needs an entity we do not know yet
  }
  const sets: Record<string, unknown>[] = [base];
  // Each value of an enum filter (optional or required) surfaces entities the unfiltered call may cap away.
  for (const [k, s] of Object.entries(props)) {
    if (!Array.isArray(s.enum)) continue;
    for (const v of s.enum.slice(0, 8)) if (base[k] !== v) sets.push({ ...base, [k]: v });
  }
  return sets.filter((a) => validates(tool.inputSchema, a)).slice(0, 10);
}

/** Stable JSON (sorted keys) for comparing argument objects. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (isPlainObject(v)) {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}
