/**
 * Tasks in a person's words. What a call is about is said from its arguments — an id as "the book lb-007", a path as
 * 'the file "…"', names as themselves, a search as 'matching "…"', numbers as amounts — and a write as the change it
 * makes ('Record that "Tomas Lindqvist" works on "Beacon".'). A task never names a tool nor an argument key: which
 * tool to call, and with what, is the agent's to find out.
 */
import type { ToolInfo } from '../../mcp/index.js';
import type { JsonSchema } from '../json-schema-args.js';
import type { Answer } from './answer.js';
import { DURATION_NAMES, entityKey, GLOB_NAMES, OLD_TEXT_NAMES, SEARCH_NAMES } from './arguments.js';
import type { Scalar } from './types.js';
import { isPlainObject, isScalar } from './values.js';
import { idStem, isIdName, label, singular, UNITS, VERBS, words, type Fill, type TemplateFamily } from './wording.js';

/** A noun phrase for what a call is about, and how each value it states is said in it. */
export interface Phrased {
  subject: string;
  /** Each stated value → the words that say it in the subject (what a clue may stand in for). */
  mentions: Record<string, string>;
  /** The subject states nothing of the call (a tool that takes nothing): a whole reply is asked as its result. */
  bare?: boolean;
}

/** Argument keys that say where: their value reads "in …". */
const WHERE_NAMES = /^(location|city|place|region|area|country|currency|language|lang|locale|zone|timezone)$/i;

/** Verbs that lead tool names besides the reading ones: left out of the noun a tool is about. */
const ACTION_VERBS = new Set([...VERBS, 'toggle', 'trigger', 'run', 'start', 'stop', 'create', 'add', 'make', 'place', 'set', 'update', 'delete', 'remove', 'simulate', 'convert', 'calculate', 'compute', 'count', 'lookup', 'look']);

/** What a tool is about, in words: get-tiny-image → "tiny image", get_structured_content → "structured content". */
export function aboutWords(tool: ToolInfo): string {
  const ws = words(tool.name);
  let i = 0;
  while (i < ws.length - 1 && ACTION_VERBS.has(ws[i])) i++;
  return ws.slice(i).join(' ');
}

const quote = (v: unknown) => `"${String(v)}"`;

export function listOf(xs: readonly string[]): string {
  return xs.length <= 1 ? xs.join('') : `${xs.slice(0, -1).join(', ')} and ${xs[xs.length - 1]}`;
}

/** "price_usd" → "USD" (a unit in a key's last word) or a currency code in its description ("Amount in USD"). */
function unitOf(key: string, schema: JsonSchema | undefined): string | undefined {
  const ws = words(key);
  const byKey = ws.length >= 2 ? UNITS[ws[ws.length - 1]] : undefined;
  return byKey ?? /\bin (USD|EUR|GBP|JPY|[A-Z]{3})\b/.exec(String(schema?.description ?? ''))?.[1];
}

const UNIT_NAMES = new Set(Object.values(UNITS));

/**
 * A conversion: an amount in a unit (its key or description says which) and a where-argument naming the unit to
 * convert to ("currency": "JPY"). Said "63.6 USD in JPY"; one to the unit the amount is already in asks nothing.
 */
function conversionOf(tool: ToolInfo, args: Record<string, unknown>): { from: string; to: string } | undefined {
  const props = (tool.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
  const from = Object.entries(args).map(([k, v]) => (typeof v === 'number' ? unitOf(k, props[k]) : undefined)).find(Boolean);
  const to = Object.entries(args).find(([k, v]) => WHERE_NAMES.test(k) && typeof v === 'string' && (UNIT_NAMES.has(v) || /^[A-Z]{3}$/.test(v)))?.[1] as string | undefined;
  return from && to ? { from, to } : undefined;
}

/** Whether a call converts an amount to the unit it is already in ("71 USD in USD"): no question a person asks. */
export function convertsToOwnUnit(tool: ToolInfo, args: Record<string, unknown>): boolean {
  const c = conversionOf(tool, args);
  return c !== undefined && c.from === c.to;
}

/** Nouns of tools that hold anything (get_structured_content, fetch_data): a question about one says only where. */
const CONTAINER_NOUNS = /\b(content|contents|data|info|information|details|result|results|output|response)$/;

/**
 * A value said with what it is, from the last word of its key: messageType "debug" → 'the "debug" type', genre
 * "children" → 'the "children" genre'. The value comes first: 'genre "children"' reads as an argument written out.
 */
function described(key: string, v: string | string[]): string {
  const noun = singular(words(key).pop() ?? '');
  const quoted = listOf((Array.isArray(v) ? v : [v]).map(quote));
  if (noun.length < 3) return quoted;
  return `the ${quoted} ${Array.isArray(v) && v.length > 1 ? plural(noun) : noun}`;
}

/**
 * The subject of a question about a call of `tool` with `args`: "the book lb-007", 'the file "{sandbox}/todo.txt"',
 * 'the entities matching "Atlas"', "the sum of 3 and 4". `noun` is what the answer is about ("entity") and `many`
 * says the answer lists several of them; `related`, that they are linked to what the call names, not it. Undefined when an argument cannot be said in plain words (a required
 * switch, an object).
 */
export function subjectOf(tool: ToolInfo, args: Record<string, unknown>, opts: { noun?: string; many?: boolean; related?: boolean; isFolder: (p: string) => boolean }): Phrased | undefined {
  const props = (tool.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
  const heads: string[] = [];
  const filters: string[] = [];
  const values: string[] = [];
  const mentions: Record<string, string> = {};
  let glob: string | undefined;
  for (const [k, v] of Object.entries(args)) {
    const ek = entityKey(k);
    if (typeof v === 'number' && DURATION_NAMES.test(k)) continue;
    if (typeof v === 'string' && isIdName(k)) {
      const head = `the ${label(idStem(k) ?? singular(aboutWords(tool)))} ${v}`;
      heads.push(head);
      mentions[v] = head;
    } else if (ek === 'path' && typeof v === 'string') {
      const head = `the ${opts.isFolder(v) ? 'folder' : 'file'} ${quote(v)}`;
      heads.push(head);
      mentions[v] = head;
    } else if (ek === 'path' && Array.isArray(v) && v.every((x) => typeof x === 'string')) {
      heads.push(`the ${v.length > 1 ? 'files' : 'file'} ${listOf(v.map(quote))}`);
    } else if (ek === 'name' && Array.isArray(v) && v.every(isScalar)) {
      heads.push(listOf(v.map(quote)));
      for (const x of v) mentions[String(x)] = quote(x);
    } else if (typeof v === 'string' && GLOB_NAMES.test(k)) glob = v;
    else if (typeof v === 'string' && SEARCH_NAMES.test(k)) {
      if (v !== '') filters.push(`matching ${quote(v)}`);
    } else if (typeof v === 'string' && WHERE_NAMES.test(k)) filters.push(`in ${v}`);
    else if (ek === 'name' && typeof v === 'string') {
      heads.push(quote(v));
      mentions[v] = quote(v);
    } else if (typeof v === 'number') {
      const unit = unitOf(k, props[k]);
      values.push(unit ? `${v} ${unit}` : String(v));
    } else if (typeof v === 'string') values.push(described(k, v));
    else if (Array.isArray(v) && v.length && v.every(isScalar)) values.push(described(k, v.map(String)));
    else return undefined;
  }
  const noun = opts.noun ?? singular(aboutWords(tool));
  const these = opts.many ? `the ${plural(noun)}` : `the ${noun}`;
  // What the things are before how they were searched: 'the books of the "children" genre matching "Silent"'.
  const rest = [...(values.length ? [`of ${listOf(values)}`] : []), ...filters].join(' ');
  const conversion = conversionOf(tool, args);
  let subject: string;
  if (conversion && !heads.length && glob === undefined) {
    // "63.6 USD in JPY": what is converted, and to what; a conversion to its own unit is no question.
    if (conversion.from === conversion.to) return undefined;
    subject = [listOf(values), ...filters].join(' ');
  } else if (!heads.length && !values.length && glob === undefined && filters.length && filters.every((f) => f.startsWith('in ')) && !opts.many && CONTAINER_NOUNS.test(aboutWords(tool))) {
    // "the temperature of Chicago": a tool that only holds things is no noun a person would ask about.
    subject = listOf(filters.map((f) => f.replace(/^in /, '')));
  } else if (glob !== undefined) subject = `the files named ${glob}${heads.length ? ` in ${listOf(heads)}` : ''}`;
  else if (heads.length && opts.noun === 'entry' && !opts.many) subject = `the entry in ${listOf(heads)}`;
  // A record linked to what the call names, not its own: "the relation of "Ada Lovelace"".
  else if (heads.length && opts.related && opts.noun) subject = [`the ${opts.many ? plural(opts.noun) : opts.noun} of ${listOf(heads)}`, rest].filter(Boolean).join(' ');
  // A tree is everything below a folder, at any depth (a listing is what is directly in it).
  else if (heads.length && opts.many && /\btree\b/.test(words(tool.name).join(' '))) subject = `the ${plural(noun)} anywhere under ${listOf(heads)}`;
  else if (heads.length) subject = [opts.many && !heads.some((h) => h.startsWith('"')) ? `the ${plural(noun)} of ${listOf(heads)}` : listOf(heads), rest].filter(Boolean).join(' ');
  else if (rest) {
    // "the sum of 3 and 4", "the echo of the "hi" message": what the tool makes; its records one at a time ("the book").
    const about = aboutWords(tool);
    const one = values.length && about !== plural(noun) ? `the ${about}` : `the ${noun}`;
    subject = `${opts.many ? these : one} ${rest}`;
  }
  else subject = opts.many ? `the ${plural(noun)}` : `the ${aboutWords(tool)}`;
  return { subject, mentions, bare: !heads.length && !rest && glob === undefined };
}

export function plural(noun: string): string {
  if (/(s|x|ch|sh)$/.test(noun)) return `${noun}es`;
  if (/[^aeiou]y$/.test(noun)) return `${noun.slice(0, -1)}ies`;
  return `${noun}s`;
}

/** "is" or "are", as a field in words needs. */
function isAre(field: string): string {
  return /[^s]s$/.test(field.split(' ').find((w, i, a) => i === a.length - 1 || a[i + 1] === 'of') ?? field) ? 'are' : 'is';
}

/** The fill of a question's template: its answer's field, and the subject. */
export function questionFill(answer: Answer, subject: string, bare = false): { family: TemplateFamily; fill: Fill } {
  // A search's own count is asked of the search: "How many books of the "children" genre match "Silent"?".
  if (answer.kind === 'field' && answer.counts) return { family: 'count', fill: { things: subject.replace(/^the /, '') } };
  if (answer.kind === 'list') return { family: 'list', fill: { fields: plural(answer.field), field: answer.field, subject } };
  const of = answer.inFile ? 'in' : 'of';
  if (answer.kind === 'values') return { family: 'values', fill: { field: answer.field, subject, of } };
  if (/^(result|exact response)$/.test(answer.field)) {
    return bare ? { family: 'field', fill: { field: 'result', subject, is: 'is', of } } : { family: 'whole', fill: { subject } };
  }
  return { family: 'field', fill: { field: answer.field, subject, is: isAre(answer.field), of } };
}

/**
 * The question that asks for `answer` from a call of `tool` with `args`: its template family and fill, and how each
 * value it states is said; undefined when the arguments do not read as plain words. What the answer lists or counts
 * is said in the plural ("the books matching …").
 */
export function question(tool: ToolInfo, args: Record<string, unknown>, answer: Answer, isFolder: (p: string) => boolean): { family: TemplateFamily; fill: Fill; mentions: Record<string, string> } | undefined {
  const phrased = subjectOf(tool, args, { noun: answer.noun, many: answer.kind === 'list' || (answer.kind === 'field' && answer.counts === true), related: answer.kind !== 'list' && answer.related === true, isFolder });
  if (!phrased) return undefined;
  const { family, fill } = questionFill(answer, phrased.subject, phrased.bare);
  // Values that come with no subject ("the allowed directories") are asked on their own.
  const bare = answer.kind === 'values' && !Object.keys(args).length && !answer.noun;
  return { family: bare ? 'noSubjectValues' : family, fill, mentions: phrased.mentions };
}

/** A field of a record in words, as a question about a `noun` says it: "entityType" of an entity → "type", "branch_id" → "id of the branch". */
export function fieldWords(key: string, noun?: string): string {
  const ws = words(key);
  const last = ws[ws.length - 1];
  if (ws.length >= 2 && (last === 'id' || last === 'ids')) {
    const stem = ws.slice(0, -1).join(' ');
    return last === 'id' ? `id of the ${stem}` : `ids of the ${plural(singular(stem))}`;
  }
  if (ws.length >= 2 && noun && singular(ws[0]) === noun) return label(ws.slice(1).join('_'));
  const l = label(key);
  // A bare participle ("converted") is the value it names.
  return /^[a-z]+ed$/.test(l) ? `${l} value` : l;
}

/** The kind of a record in a write, from a field that says it ("entityType": "person"), else its noun. */
function kindOf(o: Record<string, unknown>, noun: string): string {
  const t = Object.entries(o).find(([k, v]) => /type$/i.test(k) && typeof v === 'string' && /^[a-z][a-z ]{1,20}$/i.test(v));
  return t ? String(t[1]) : noun;
}

/**
 * A write's change in words, as a clause to put in a request ('record that "A" works on "B"', 'add the person "C"'),
 * or undefined when its arguments do not read as one.
 */
export function writeSentence(tool: ToolInfo, args: Record<string, unknown>, isFolder: (p: string) => boolean): Phrased | undefined {
  const verb = verbOf(tool);
  const mentions: Record<string, string> = {};
  const copies = /\bcop(y|ies)\b/i.test(JSON.stringify(tool.inputSchema));
  const clauses: string[] = [];
  const others: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(args)) {
    if (Array.isArray(v) && v.length && v.every(isPlainObject)) {
      for (const o of v as Record<string, unknown>[]) {
        const c = recordClause(verb, singular(words(k).pop() ?? k), o, mentions, copies);
        if (!c) return undefined;
        clauses.push(c);
      }
    } else others[k] = v;
  }
  if (clauses.length) {
    // The call's other arguments say where (the file an edit is in) or for whom (the customer of an order).
    const where = Object.entries(others).filter(([k, v]) => entityKey(k) === 'path' && typeof v === 'string');
    const rest = Object.entries(others).filter(([k]) => !where.some(([w]) => w === k));
    if (rest.some(([, x]) => !isPlainObject(x))) return undefined;
    const who = rest.map(([, o]) => Object.values(o as Record<string, unknown>).filter(isScalar).map(String));
    const whoText = who.length ? ` for ${who.map((xs) => `${quote(xs[0])}${xs.length > 1 ? ` (${xs.slice(1).join(', ')})` : ''}`).join(' and ')}` : '';
    const whereText = where.map(([, p]) => {
      const m = `the ${isFolder(p as string) ? 'folder' : 'file'} ${quote(p)}`;
      mentions[p as string] = m;
      return ` in ${m}`;
    }).join('');
    return { subject: `${listOf(clauses)}${whereText}${whoText}`, mentions };
  }
  const entries = Object.entries(args);
  // One path and nothing else: a folder or file made, named in the folder it goes in.
  const path = entries.find(([k, v]) => entityKey(k) === 'path' && typeof v === 'string')?.[1] as string | undefined;
  if (path && entries.length === 1 && path.includes('/')) {
    const dir = path.slice(0, path.lastIndexOf('/'));
    const what = /\b(director(y|ies)|folders?|dirs?)\b/.test(words(tool.name).join(' ')) ? 'folder' : 'file';
    mentions[dir] = `the folder ${quote(dir)}`;
    return { subject: `${verb} a ${what} named ${quote(path.slice(path.lastIndexOf('/') + 1))} in the folder ${quote(dir)}`, mentions };
  }
  if (entries.length && entries.every(([, v]) => isScalar(v))) {
    const c = recordClause(verb, singular(aboutWords(tool)), args, mentions, copies);
    if (c) return { subject: c, mentions };
  }
  const about = subjectOf(tool, args, { isFolder });
  if (!about) return undefined;
  return { subject: `${verb} ${about.subject}`, mentions: { ...mentions, ...about.mentions } };
}

/** The verb a write's request starts with: its tool's first word, or the thing a "place_order" makes ("order"). */
function verbOf(tool: ToolInfo): string {
  const ws = words(tool.name);
  if (/^(place|submit|put|make|do)$/.test(ws[0]) && ws.length >= 2) return singular(ws[1]);
  return ws[0] === 'new' ? 'create' : ws[0];
}

/**
 * One record of a write in words, by what its fields are: a link between two things ("from", "to", a type), a new
 * thing with a name, a kind and notes, notes added to a named thing, or so many of an id.
 */
function recordClause(verb: string, noun: string, o: Record<string, unknown>, mentions: Record<string, string>, copies: boolean): string | undefined {
  const keys = Object.keys(o);
  const str = (re: RegExp) => {
    const k = keys.find((x) => re.test(x) && typeof o[x] === 'string');
    return k ? (o[k] as string) : undefined;
  };
  const lists = keys.filter((k) => Array.isArray(o[k]) && (o[k] as unknown[]).every((x) => typeof x === 'string'));
  const notes = lists.flatMap((k) => o[k] as string[]);
  const from = str(/^(from|source|src|subject)$/i);
  const to = str(/^(to|target|dest|destination|object)$/i);
  const kind = str(/type$/i);
  if (from !== undefined && to !== undefined && kind !== undefined && keys.length === 3) {
    mentions[from] = quote(from);
    mentions[to] = quote(to);
    return `record that ${quote(from)} ${kind} ${quote(to)}`;
  }
  if (from !== undefined && to !== undefined && keys.length === 2) {
    mentions[from] = quote(from);
    return `${verb} ${quote(from)} to ${quote(to)}`;
  }
  // Text replaced by other text (an edit's oldText and newText).
  const old = str(OLD_TEXT_NAMES);
  const replacement = keys.find((k) => /^(new|replacement|replace|to)_?(text|string|str|content|line|value)?$/i.test(k) && typeof o[k] === 'string');
  if (old !== undefined && replacement && keys.length === 2) return `replace ${quote(old)} with ${quote(o[replacement])}`;
  // A file written with its content.
  const pathKey = keys.find((k) => entityKey(k) === 'path' && typeof o[k] === 'string');
  const textKey = keys.find((k) => k !== pathKey && typeof o[k] === 'string');
  if (pathKey && textKey && keys.length === 2) {
    mentions[o[pathKey] as string] = `the file ${quote(o[pathKey])}`;
    return `${verb} ${quote(o[textKey])} to the file ${quote(o[pathKey])}`;
  }
  const nameKey = keys.find((k) => entityKey(k) === 'name' && typeof o[k] === 'string');
  const name = nameKey ? (o[nameKey] as string) : undefined;
  const notesText = notes.length ? listOf(notes.map(quote)) : '';
  if (name !== undefined && kind !== undefined && keys.length === 2 + lists.length) {
    mentions[name] = quote(name);
    return `add the ${kindOf(o, noun)} ${quote(name)}${notesText ? ` with the notes ${notesText}` : ''}`;
  }
  if (name !== undefined && notes.length && keys.length === 1 + lists.length) {
    mentions[name] = quote(name);
    return `add ${notesText} to what is recorded about ${quote(name)}`;
  }
  const idKey = keys.find((k) => isIdName(k) && typeof o[k] === 'string');
  const amountKey = keys.find((k) => typeof o[k] === 'number');
  if (idKey && amountKey && keys.length === 2) {
    const what = `the ${label(idStem(idKey) ?? noun)} ${o[idKey] as string}`;
    mentions[o[idKey] as string] = what;
    return `${verb} ${o[amountKey] as number} ${copies ? (o[amountKey] === 1 ? 'copy' : 'copies') + ' ' : ''}of ${what}`;
  }
  const scalars = Object.values(o).filter(isScalar) as Scalar[];
  if (scalars.length !== keys.length) return undefined;
  return `${verb} ${listOf(scalars.map(quote))}`;
}
