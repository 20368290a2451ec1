/**
 * Reading a tool's result: its data (JSON, a `key: value` listing, a directory listing), the records and scalar
 * leaves in it, and whether it is an error although the server did not say so.
 */
import type { ToolCallOutcome } from '../../mcp/index.js';
import type { EntityRecord, Scalar } from './types.js';
import { isPlainObject, isScalar } from './values.js';
import { singular, toolNoun, words, isIdName } from './wording.js';

export const LABEL_KEYS = ['title', 'name', 'label', 'display_name', 'displayName', 'full_name', 'fullName'];

/** Text that is an error message although the server did not set isError (ENOENT as text, "not found"). */
export const ERROR_TEXT =
  /^(error|failed|failure|exception|invalid|unknown|cannot|can't|could not|couldn't|unable|no such|not found|access denied|permission denied|forbidden|unauthori[sz]ed)\b|\b(ENOENT|EACCES|EPERM|ENOTDIR|EISDIR|EEXIST)\b|\b(not found|does not exist|doesn't exist|no such file|outside (the )?allowed|access denied|permission denied|no (matches|results)( found)?|nothing found)\b|^[^\n]{0,300}:\s*Error\b/im;

/**
 * Why a result that the server did not mark isError is one all the same — an error message as text, or an empty
 * result — or undefined when it is a real result. Such results are never harvested nor made ground truth.
 */
export function disguisedError(o: ToolCallOutcome): string | undefined {
  const text = resultText(o);
  if (text === '') return 'an empty result';
  const data = outcomeData(o);
  if (data !== undefined && isEmpty(data)) return 'an empty result';
  if ((data === undefined || typeof data === 'string' || textWrapper(o) !== undefined) && ERROR_TEXT.test(text)) return 'an error message';
  return undefined;
}

/** The string of a structuredContent that only wraps the text ({"content": "…"}, as server-filesystem sends). */
export function textWrapper(o: ToolCallOutcome): string | undefined {
  const sc = o.structuredContent;
  if (!isPlainObject(sc)) return undefined;
  const values = Object.values(sc);
  return values.length === 1 && typeof values[0] === 'string' ? values[0] : undefined;
}

/** The result as text: the wrapped string when structuredContent only wraps one, else the text the model reads. */
export function resultText(o: ToolCallOutcome): string {
  return (textWrapper(o) ?? o.text).trim();
}

/** [] / {} / null / "", or an object whose every value is empty ({"entities": [], "relations": []}). */
export function isEmpty(v: unknown): boolean {
  if (v === null || v === undefined || v === '') return true;
  if (Array.isArray(v)) return v.length === 0;
  if (isPlainObject(v)) return Object.values(v).every(isEmpty);
  return false;
}

/** Plain text that is a listing of `key: value` lines (two or more) reads as an object. */
export function keyValueLines(text: string): Record<string, string> | undefined {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
  const pairs = lines.map((l) => /^([A-Za-z][\w ]{0,40}):\s+(.+)$/.exec(l));
  if (lines.length < 2 || pairs.some((m) => !m)) return undefined;
  return Object.fromEntries(pairs.map((m) => [m![1].trim(), m![2].trim()]));
}

/** Lines such as "[FILE] notes.txt" / "[DIR] src" (a directory listing) as {type, name} entries. */
export function listingLines(text: string): { type: string; name: string }[] | undefined {
  // A listing with sizes ends with its totals ("Total: 2 files, 0 directories", "Combined size: 112 B").
  const lines = text.split('\n').map((l) => l.trim()).filter((l) => l && !/^(total|combined size):/i.test(l));
  const entries = lines.map((l) => /^\[([A-Za-z]+)\]\s+(.+?)(?:\s{2,}.*)?$/.exec(l));
  if (!lines.length || entries.some((m) => !m)) return undefined;
  return entries.map((m) => ({ type: m![1].toLowerCase(), name: m![2] }));
}

export function outcomeData(o: ToolCallOutcome): unknown {
  if (o.structuredContent !== undefined && textWrapper(o) === undefined) return o.structuredContent;
  const t = resultText(o);
  if (t.startsWith('{') || t.startsWith('[')) {
    try {
      return JSON.parse(t);
    } catch {
      // Not JSON: a listing starts with "[FILE] …" too.
    }
  }
  return listingLines(t) ?? keyValueLines(t);
}

/** Scalar leaves outside arrays, with their key path. */
export function leaves(data: unknown, path: string[] = []): { path: string[]; value: Scalar }[] {
  if (!isPlainObject(data)) return [];
  const out: { path: string[]; value: Scalar }[] = [];
  for (const [k, v] of Object.entries(data)) {
    if (isScalar(v)) out.push({ path: [...path, k], value: v });
    else if (isPlainObject(v) && path.length < 2) out.push(...leaves(v, [...path, k]));
  }
  return out;
}

/** Every object with at least two scalar fields anywhere in `data`, with a noun guessed from its context. */
export function records(data: unknown, tool: string, parentKey?: string, out: EntityRecord[] = []): EntityRecord[] {
  if (Array.isArray(data)) {
    const noun = parentKey && !/^(results?|items?|data|matches|hits|entries|records|list)$/i.test(parentKey) ? singular(words(parentKey).pop() ?? '') : toolNoun(tool);
    for (const x of data) {
      if (!isPlainObject(x)) continue;
      const fields = scalarFields(x);
      if (Object.keys(fields).length >= 2) out.push({ noun, fields, ...stringLists(x) });
      for (const [k, v] of Object.entries(x)) if (Array.isArray(v) || isPlainObject(v)) records(v, tool, k, out);
    }
    return out;
  }
  if (!isPlainObject(data)) return out;
  if (parentKey === undefined) {
    const fields = scalarFields(data);
    if (Object.keys(fields).length >= 2 && ('id' in fields || Object.keys(fields).some(isIdName))) out.push({ noun: toolNoun(tool), fields });
  }
  for (const [k, v] of Object.entries(data)) if (Array.isArray(v) || isPlainObject(v)) records(v, tool, k, out);
  return out;
}

export function stringLists(o: Record<string, unknown>): { lists?: Record<string, string[]> } {
  const lists = Object.entries(o).filter((e): e is [string, string[]] => Array.isArray(e[1]) && e[1].length > 0 && e[1].every((x) => typeof x === 'string'));
  return lists.length ? { lists: Object.fromEntries(lists) } : {};
}

export function scalarFields(o: Record<string, unknown>): Record<string, Scalar> {
  const f: Record<string, Scalar> = {};
  for (const [k, v] of Object.entries(o)) if (isScalar(v)) f[k] = v;
  return f;
}

export function recordLabel(r: EntityRecord): { key: string; value: string } | undefined {
  for (const k of LABEL_KEYS) {
    const v = r.fields[k];
    if (typeof v === 'string' && v.length >= 2 && v.length <= 60) return { key: k, value: v };
  }
  return undefined;
}
