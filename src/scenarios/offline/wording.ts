/**
 * How tasks are worded: field names in plain words, and the phrasing templates a task is drawn from (a partition
 * uses only its own share of each family, so sets share no phrasing); phrasing.ts fills them.
 */
import type { Rng } from '../../util/rng.js';

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

export function capitalise(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

export type Fill = Record<string, string>;

/**
 * Phrasing templates; `{x}` is replaced from the fill. None names a tool or an argument: `{subject}` says what the
 * task is about and `{change}` what to change, in plain words (phrasing.ts); `{of}` is "of", or "in" for what a
 * file holds ("the rent in the file …"). Each family has 8, so 4 partitions
 * (warm-up, train, validation, test) get 2 apiece, and 2 or 3 partitions get 4 or 2–3.
 */
export const TEMPLATES = {
  field: [
    'What {is} the {field} {of} {subject}?',
    'Tell me the {field} {of} {subject}.',
    'Look up {subject} and give me the {field}.',
    "I'd like to know the {field} {of} {subject}.",
    'Can you check {subject} and tell me the {field}?',
    'Find the {field} {of} {subject}, please.',
    'Please give me the {field} {of} {subject}.',
    'Do you know the {field} {of} {subject}?',
  ],
  whole: [
    'What is {subject}?',
    'Tell me {subject}.',
    'Can you find out {subject}?',
    "I'd like to know {subject}.",
    'Please give me {subject}.',
    'Find out {subject}, please.',
    'What do you get for {subject}?',
    'Could you tell me {subject}?',
  ],
  list: [
    'What are the {fields} of {subject}?',
    'List the {fields} of {subject}.',
    'Give me the {field} of each of {subject}.',
    'I need the {fields} of {subject}.',
    'Can you tell me the {fields} of {subject}?',
    'Which {fields} do {subject} have?',
    'Go through {subject} and give me their {fields}.',
    'Tell me the {field} of every one of {subject}.',
  ],
  values: [
    'What are the {field} {of} {subject}?',
    'List the {field} {of} {subject}.',
    'Tell me all the {field} {of} {subject}.',
    'I need every one of the {field} {of} {subject}.',
    'Can you give me the {field} {of} {subject}?',
    'Please list the {field} {of} {subject}.',
    'Find all the {field} {of} {subject}.',
    'Find the {field} {of} {subject}, please.',
  ],
  count: [
    'How many {things} are there?',
    'Tell me how many {things} there are.',
    'What is the number of {things}?',
    'How many {things} can you find?',
    'Find out how many {things} there are.',
    'I need the number of {things}.',
    'Could you count the {things}?',
    'Do you know how many {things} there are?',
  ],
  noSubjectValues: [
    'What are the {field}?',
    'List the {field}.',
    'Tell me all the {field}.',
    'I need every one of the {field}.',
    'Can you give me the {field}?',
    'Please list the {field}.',
    'What {field} are there?',
    'Find the {field}, please.',
  ],
  write: [
    'Please {change}.',
    '{Change}.',
    'I need you to {change}.',
    'Could you {change}?',
    'Go ahead and {change}.',
    '{Change}, please.',
    'Can you {change}?',
    'Kindly {change}.',
  ],
  writeThenAnswer: [
    'Please {change}, then tell me the {field}.',
    '{Change}. What is the {field} now?',
    'I need you to {change} and report the {field}.',
    'Could you {change}? Tell me the {field} afterwards.',
    'Go ahead and {change}; what {field} do you get?',
    '{Change}, please, and give me the {field}.',
    'Can you {change} and say what the {field} is?',
    'Kindly {change} and let me know the {field}.',
  ],
  thenWrite: [
    'Then {change}.',
    'After that, {change}.',
    'Next, {change}.',
    'Once that is done, {change}.',
    'When that is done, {change}.',
    'Afterwards, {change}.',
    'Then also {change}.',
    'After this, {change}.',
  ],
  thenRead: [
    'Then check that {what} is there.',
    'After that, confirm that {what} shows up.',
    'Next, make sure the change took: look {what} up.',
    'Once that is done, look {what} up to verify it.',
    'When that is done, check {what} again.',
    'Afterwards, look {what} up to confirm it was saved.',
    'Then look at {what} to see that it was stored.',
    'After this, double-check {what}.',
  ],
  flow: [
    'What {is} the {field} of {subject}?',
    'Take {subject} and tell me the {field}.',
    'Work out the {field} of {subject}.',
    'First find {inner}; then tell me the {field} of {it}.',
    "I'd like the {field} of {subject}.",
    'Using {inner}, give me the {field} of {it}.',
    'Look up {inner}, and report the {field} of {it}.',
    'Find {inner} and then the {field} of {it}.',
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
