/** Walking JSON values: scalars, plain objects, and the leaves of either, however deep (bounded). */
import { FILLER_WORDS } from '../json-schema-args.js';
import type { Scalar } from './types.js';

/** Whether a string holds the synthesizer's stand-in text ("hello world"): nothing of the server's own. */
export function isFiller(v: string): boolean {
  const s = v.toLowerCase();
  return FILLER_WORDS.some((w) => s.includes(w));
}

export function isScalar(v: unknown): v is Scalar {
  return typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v)) || typeof v === 'boolean';
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

export function scalarArgValues(args: unknown, out = new Set<string>()): Set<string> {
  if (isScalar(args)) out.add(String(args).trim().toLowerCase());
  else if (Array.isArray(args)) for (const x of args) scalarArgValues(x, out);
  else if (isPlainObject(args)) for (const v of Object.values(args)) scalarArgValues(v, out);
  return out;
}

/** Calls `fn` on every plain object in `data`, however deep (bounded). */
export function walkObjects(data: unknown, fn: (o: Record<string, unknown>) => void, depth = 0): void {
  if (depth > 6) return;
  if (Array.isArray(data)) for (const x of data) walkObjects(x, fn, depth + 1);
  else if (isPlainObject(data)) {
    fn(data);
    for (const v of Object.values(data)) walkObjects(v, fn, depth + 1);
  }
}

/** Every string in a value, however deep. */
export function stringLeaves(v: unknown, out: string[] = []): string[] {
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) for (const x of v) stringLeaves(x, out);
  else if (isPlainObject(v)) for (const x of Object.values(v)) stringLeaves(x, out);
  return out;
}

/** Numbers anywhere in a JSON value, with their paths; an array's item count is its `length`. */
export function numericLeaves(v: unknown, path: string[] = [], out: { path: string[]; value: number }[] = []): { path: string[]; value: number }[] {
  if (path.length > 6) return out;
  if (typeof v === 'number' && Number.isFinite(v) && path.length) out.push({ path, value: v });
  else if (Array.isArray(v)) {
    out.push({ path: [...path, 'length'], value: v.length });
    v.forEach((x, i) => numericLeaves(x, [...path, String(i)], out));
  } else if (isPlainObject(v)) for (const [k, x] of Object.entries(v)) numericLeaves(x, [...path, k], out);
  return out;
}

export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
