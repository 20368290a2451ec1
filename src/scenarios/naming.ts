/**
 * Whether a task's text names a tool: the one detector for "a task says what to find or change, never which tool to
 * call", used by the quality table (ruler/quality.ts) and by the LLM's rewording of offline tasks (rephrase.ts).
 */
import { singular, words } from './offline/wording.js';

/** A tool as the detector reads it: its name and the argument keys of its input schema. */
export interface NamedTool {
  name: string;
  inputSchema?: Record<string, unknown>;
}

/**
 * What a task's text names of the server's tools, or undefined: a tool's name as written (for names with `_`, `-` or
 * an inner capital), a tool's name in words ("search nodes", "directory tree"), an argument key of two words or more
 * in words ("entity type", "exclude patterns"), or a one-word key followed by its value ("tail 6", 'query "x"').
 * A one-word tool name or key alone is an ordinary word ("echo", "path") and is not counted.
 */
export function toolNaming(task: string, tools: readonly NamedTool[]): string | undefined {
  const taskWords = words(task).map(singular);
  for (const t of tools) {
    if (/[_-]|[a-z][A-Z]/.test(t.name) && new RegExp(`(^|[^\\w-])${escapeRegExp(t.name)}($|[^\\w-])`, 'i').test(task)) return t.name;
    const ws = words(t.name).map(singular);
    if (ws.length >= 2 && inRow(taskWords, ws)) return t.name;
  }
  for (const key of new Set(tools.flatMap((t) => argumentKeys(t.inputSchema)))) {
    const ws = words(key).map(singular);
    if (ws.length >= 2 && inRow(taskWords, ws)) return key;
    // A one-word key reads as its word unless a value follows it, as in "tail 6" or 'query "Atlas"'.
    if (ws.length === 1 && new RegExp(`(^|[^\\w])(${escapeRegExp(words(key)[0])}|${escapeRegExp(ws[0])}s?)\\s*[:=]?\\s*(["'\\[{]|-?\\d)`, 'i').test(task)) return key;
  }
  return undefined;
}

/** Whether a task's text names a tool or an argument key (see toolNaming). */
export function namesTool(task: string, tools: readonly NamedTool[]): boolean {
  return toolNaming(task, tools) !== undefined;
}

function inRow(hay: readonly string[], needle: readonly string[]): boolean {
  for (let i = 0; i + needle.length <= hay.length; i++) if (needle.every((w, j) => hay[i + j] === w)) return true;
  return false;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&');
}

/** Every property name of a schema, however deep (objects, array items), bounded. */
function argumentKeys(schema: unknown, depth = 0, out: string[] = []): string[] {
  if (depth > 6 || schema === null || typeof schema !== 'object' || Array.isArray(schema)) return out;
  const s = schema as Record<string, unknown>;
  const props = s.properties && typeof s.properties === 'object' ? (s.properties as Record<string, unknown>) : {};
  for (const [k, v] of Object.entries(props)) {
    out.push(k);
    argumentKeys(v, depth + 1, out);
  }
  if (s.items) argumentKeys(s.items, depth + 1, out);
  for (const k of ['anyOf', 'oneOf', 'allOf'] as const) if (Array.isArray(s[k])) for (const x of s[k] as unknown[]) argumentKeys(x, depth + 1, out);
  return out;
}
