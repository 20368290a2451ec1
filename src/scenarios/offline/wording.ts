/**
 * How tasks are worded: field and tool names in plain words, arguments as phrases, and the phrasing templates a
 * task is drawn from (a partition uses only its own share of each family, so sets share no phrasing).
 */
import type { ToolInfo } from '../../mcp/index.js';
import type { Rng } from '../../util/rng.js';
import { isPlainObject } from './values.js';

export const VERBS = new Set(['get', 'list', 'search', 'find', 'fetch', 'check', 'read', 'show', 'query', 'lookup', 'retrieve', 'describe', 'view']);

export function words(name: string): string[] {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .split(/[^A-Za-z0-9]+/)
    .map((w) => w.toLowerCase())
    .filter(Boolean);
}

export function singular(w: string): string {
  if (/ies$/.test(w) && w.length > 4) return w.slice(0, -3) + 'y';
  if (/(ss|us)$/.test(w)) return w;
  if (/(xes|ches|shes)$/.test(w)) return w.slice(0, -2);
  if (/s$/.test(w) && w.length > 3) return w.slice(0, -1);
  return w;
}

/** The thing a tool is about: get_book → "book", list_authors → "author". */
export function toolNoun(tool: string): string {
  const ws = words(tool).filter((w) => !VERBS.has(w));
  return singular(ws[ws.length - 1] ?? words(tool)[0] ?? 'item');
}

/** "book_id" / "bookId" → "book"; "id" → undefined. Undefined too for names that are not ids. */
export function idStem(name: string): string | undefined {
  const ws = words(name);
  if (ws.length < 2 || ws[ws.length - 1] !== 'id') return undefined;
  return singular(ws[ws.length - 2]);
}

export function isIdName(name: string): boolean {
  return name.toLowerCase() === 'id' || idStem(name) !== undefined;
}

/** Units and currencies that end field names: "price_usd" reads "price in USD", "height_cm" "height in cm". */
export const UNITS: Record<string, string> = { usd: 'USD', eur: 'EUR', gbp: 'GBP', jpy: 'JPY', cm: 'cm', mm: 'mm', km: 'km', kg: 'kg', ms: 'milliseconds', sec: 'seconds', pct: 'percent' };

/** A field name in words, as a person would say it. */
export function label(key: string): string {
  const ws = words(key);
  const unit = ws.length >= 2 ? UNITS[ws[ws.length - 1]] : undefined;
  return unit ? `${ws.slice(0, -1).join(' ')} in ${unit}` : ws.join(' ');
}

export function fmt(v: unknown): string {
  if (typeof v === 'string') return `"${v}"`;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  return JSON.stringify(v);
}

export function argsPhrase(args: Record<string, unknown>): string {
  const parts = Object.entries(args).map(([k, v]) => `${label(k)} ${fmt(v)}`);
  if (parts.length <= 1) return parts.join('');
  return `${parts.slice(0, -1).join(', ')} and ${parts[parts.length - 1]}`;
}

export function actionPhrase(tool: ToolInfo): string {
  // Titles such as "Echo Tool" read better without the trailing "Tool".
  // Title-case words read as common words mid-sentence ("Read Multiple Files" → "read multiple files"); acronyms stay.
  const t = (tool.title ?? words(tool.name).join(' ')).replace(/\s*\([^)]*\)/g, '').replace(/\s+tool$/i, '');
  return t.split(' ').map((w) => (/^[A-Z][a-z]+$/.test(w) ? w.toLowerCase() : w)).join(' ');
}

export function capitalise(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/**
 * Arguments in plain words: `entities: [{name: "X", entityType: "person"}]` → 'an entity with name "X" and entity
 * type "person"'. Field names are split into words; lists of records become one phrase per record.
 */
export function plainArgs(args: Record<string, unknown>): string {
  const quote = (v: unknown) => (typeof v === 'string' ? `"${v}"` : String(v));
  const list = (xs: string[]) => (xs.length <= 1 ? xs.join('') : `${xs.slice(0, -1).join(', ')} and ${xs[xs.length - 1]}`);
  const parts = Object.entries(args).map(([k, v]): string => {
    if (Array.isArray(v) && v.length && v.every(isPlainObject)) {
      const noun = singular(words(k).pop() ?? k);
      return list(v.map((o) => `${/^[aeiou]/.test(noun) ? 'an' : 'a'} ${noun} with ${plainArgs(o as Record<string, unknown>)}`));
    }
    if (Array.isArray(v)) return `${label(k)} ${list(v.map(quote))}`;
    if (isPlainObject(v)) return `${label(k)} with ${plainArgs(v)}`;
    return `${label(k)} ${quote(v)}`;
  });
  return list(parts);
}

export type Fill = Record<string, string>;

/** Phrasing templates; `{x}` is replaced from the fill. Each family has 8, so 4 partitions (warm-up, train,
 * validation, test) get 2 apiece, and 2 or 3 partitions get 4 or 2–3. */
export const TEMPLATES = {
  field: [
    'What is the {field} of {subject}?',
    'Tell me the {field} for {subject}.',
    'Look up {subject} and give me its {field}.',
    "I'd like to know the {field} of {subject}.",
    'Can you check {subject} and report its {field}?',
    'Find the {field} of {subject}, please.',
    'Please give me the {field} of {subject}.',
    'Which {field} does {subject} have?',
  ],
  actionField: [
    'What is the {field} when you {action} with {args}?',
    '{Action} with {args} and tell me the {field}.',
    'I need the {field}: please {action} using {args}.',
    'Could you {action} for {args}? Report the {field}.',
    'Find out the {field} you get if you {action} with {args}.',
    'Please {action} with {args}; what {field} comes back?',
    'Run {action} with {args} and say what the {field} is.',
    'Using {args}, {action}; I want to know the {field}.',
  ],
  actionList: [
    '{Action} with {args} and list the {field} of every {noun} returned.',
    'Which {noun}s do you get when you {action} with {args}? Give their {field}.',
    'Please {action} using {args} and name each result by its {field}.',
    'I want the {field} of all {noun}s found when you {action} with {args}.',
    'Could you {action} for {args} and tell me the {field} of each {noun}?',
    'List the {field} of the {noun}s that come back when you {action} with {args}.',
    'Run {action} with {args}: what is the {field} of each {noun}?',
    'Using {args}, {action} and give me the {field} of every {noun}.',
  ],
  actionValues: [
    '{Action} with {args} and list all the {field}.',
    'Which {field} do you get when you {action} with {args}?',
    'Please {action} using {args} and give me every one of the {field}.',
    'I want all the {field} you get when you {action} with {args}.',
    'Could you {action} for {args} and tell me the {field}?',
    'List the {field} that come back when you {action} with {args}.',
    'Run {action} with {args}: what are the {field}?',
    'Using {args}, {action} and tell me all the {field}.',
  ],
  noArgsField: [
    'What {field} do you get when you {action}?',
    '{Action} and tell me the {field}.',
    'I need the {field}: please {action}.',
    'Could you {action}? Report the {field}.',
    'Find out the {field} you get if you {action}.',
    'Please {action}; what {field} comes back?',
    'Run {action}: what is the {field}?',
    'Just {action} and give me the {field}.',
  ],
  noArgsValues: [
    '{Action} and list all the {field}.',
    'Which {field} do you get when you {action}?',
    'Please {action} and give me every one of the {field}.',
    'I want all the {field} you get when you {action}.',
    'Could you {action} and tell me the {field}?',
    'List the {field} that come back when you {action}.',
    'Run {action}: what are the {field}?',
    'Just {action} and tell me all the {field}.',
  ],
  write: [
    'Please {action}: {args}.',
    '{Action}: {args}.',
    'I need you to {action}: {args}.',
    'Could you {action}? {Args}.',
    'Go ahead and {action}: {args}.',
    'Make this change: {action}, {args}.',
    'Apply this update: {action}, {args}.',
    'Kindly {action}: {args}.',
  ],
  thenWrite: [
    'Then {action}: {args}.',
    'After that, {action}: {args}.',
    'Next, {action}: {args}.',
    'Once that is done, {action}: {args}.',
    'When that is done, {action}: {args}.',
    'Afterwards, {action}: {args}.',
    'Then also {action}: {args}.',
    'After this, {action}: {args}.',
  ],
  thenRead: [
    'Then {call} to check that it is there.',
    'After that, {call} and confirm it shows up.',
    'Next, {call} to make sure the change took.',
    'Once that is done, {call} to verify it.',
    'When that is done, {call} and check the result.',
    'Afterwards, {call} to confirm it was saved.',
    'Then {call} to see that it was stored.',
    'After this, {call} to double-check it.',
  ],
  actionOnly: [
    'Please {action} with {args}.',
    'Go ahead and {action} using {args}.',
    'I need you to {action} with {args}.',
    'Can you {action} for {args}?',
    '{Action} with {args}, please.',
    'Run this for me: {action} with {args}.',
    'Kindly {action} with {args}.',
    'Run {action} for {args}.',
  ],
  flow: [
    'Find the {first} of {subject}, then {action} with {param} set to that value{rest}. What is the {field}?',
    'Take the {first} of {subject} and {action} with it as the {param}{rest}. Tell me the {field}.',
    'Look up {subject}: use its {first} as the {param} to {action}{rest}, and report the {field}.',
    'First get the {first} of {subject}. Then {action} with {param} equal to it{rest}. What {field} do you get?',
    'I need the {field} you get when you {action} with the {first} of {subject} as {param}{rest}.',
    'Using the {first} of {subject} as the {param}, {action}{rest} and give me the {field}.',
    'Get the {first} of {subject} and use it as the {param} when you {action}{rest}. Which {field} results?',
    'With the {first} of {subject} as {param}, {action}{rest}; tell me the {field}.',
  ],
} as const;

export type TemplateFamily = keyof typeof TEMPLATES;

/**
 * Renders a task from a template family: one template drawn at random (within the partition's share), each `{x}`
 * filled, and `{X}` filled capitalised.
 */
export function templateRenderer(rng: Rng, partition: { index: number; of: number } | undefined): (family: TemplateFamily, fill: Fill) => string {
  const templates = (family: TemplateFamily): readonly string[] =>
    partition ? TEMPLATES[family].filter((_, i) => i % partition.of === partition.index) : TEMPLATES[family];
  return (family, fill) => {
    const tpl = rng.pick(templates(family));
    return tpl.replace(/\{(\w+)\}/g, (_, k: string) => {
      const lower = k.charAt(0).toLowerCase() + k.slice(1);
      const v = fill[lower] ?? '';
      return k === lower ? v : capitalise(v);
    });
  };
}
