/**
 * Verifiable scenarios with no LLM (`mcprl scenarios --offline`).
 *
 * 1. Discover: call the server's read-only tools that need no entity (listings, searches with an empty
 *    query, enum filters) and harvest records, ids and names from their output.
 * 2. Generate: synthesize arguments from each tool's inputSchema, preferring harvested values; call the tool;
 *    turn its real output into a question whose answer is a value from that output. Three shapes:
 *    - lookup (difficulty 1–2): one call, arguments stated in the task;
 *    - chain (3–4): the task names an entity by its label ("the book "The Quiet Orchard"", "the author of
 *      …"), so the agent must find the id with one tool before using it with another;
 *    - flow (4–5): a number read from one tool's output feeds another tool's argument.
 * 3. Replay every scenario's checks against the server and keep it only if every call succeeds and every
 *    expected value is in the real output again (this also weeds out non-deterministic tools).
 *
 * Only tools annotated `readOnlyHint: true` are ever called, through a guard that throws otherwise.
 * Everything is reproducible from `seed` (given the same server).
 *
 * Disjoint sets (warm-up / train / val / test): pass `partition: {index, of}`. Each scenario has an entity key
 * (the arguments of its first checked call, e.g. `{"book_id":"bk-007"}`); only scenarios whose key hashes to
 * bucket `index` of `of` are kept, and only phrasing templates with `templateIndex % of === index` are used.
 * So partitions 0–3 of 4 never share an entity key nor a phrasing template. `exclude` additionally
 * rejects scenarios mentioning given entity values or near-duplicating given tasks.
 */
import type { CallSetting, CallToolOptions, PolicyDecision, ToolCallOutcome, ToolInfo } from '../mcp/index.js';
import { scenariosPerTool, type NoScenarioReason, type ToolCoverage } from './coverage.js';
import { DEFAULT_DUPLICATE_THRESHOLD, DuplicateFilter } from './dedup.js';
import { synthesizeArgs, validates, resolveRefs, type CandidateContext, type JsonSchema } from './json-schema-args.js';
import { createRng, hashString, type Rng } from '../util/rng.js';
import { answerContains, isStateCheck, normalizeAnswerText, numberAt, replaceSandbox, stateShows, valueAnswerChecks, type Check, type Scenario, type StateCheck } from './scenario.js';
import { numberValue } from './numbers.js';
import { SANDBOX_PLACEHOLDER } from '../mcp/sandbox.js';
import { realpathSync } from 'node:fs';
import { McprlError, oneLine } from '../util/errors.js';

/** What scenario generation needs from a server connection; an McpSession satisfies it. */
export interface ScenarioServer {
  listTools(): Promise<ToolInfo[]>;
  callTool(name: string, args: Record<string, unknown>, opts?: CallToolOptions): Promise<ToolCallOutcome>;
  /** The session's safety policy, so that the coverage report can say which tools it refuses. */
  readonly policy?: { check(tool: ToolInfo, where?: CallSetting): PolicyDecision };
  /** The server's `{sandbox}` directory, when it has one: scenarios speak of it as `{sandbox}`. */
  readonly sandboxDir?: string;
}

export interface OfflineOptions {
  /** How many scenarios to produce (fewer if the server does not offer enough). Default 24. */
  count?: number;
  /** Seed for every random choice. Default 1. */
  seed?: number;
  /** Keep only this bucket of entity keys and phrasing templates (see the module comment). */
  partition?: { index: number; of: number };
  /** Reject scenarios whose checked arguments use one of `entities`, or whose task near-duplicates one of `tasks`. */
  exclude?: { entities?: Iterable<string>; tasks?: Iterable<string> };
  /** Candidate scenarios to try before stopping. Default (10 · count + 50) · partition.of. */
  maxAttempts?: number;
  /** Timeout of one tool call in ms. Default 10000. A tool that times out is not used again. */
  callTimeoutMs?: number;
  /** Near-duplicate threshold (see dedup.ts). Default 0.8. */
  duplicateThreshold?: number;
  /**
   * Opens a fresh, isolated server (a new process with its own `{sandbox}`). Given, tools that write get tasks too:
   * each is replayed by a scripted solver on a server of its own, and checked by the state a read-only tool shows
   * afterwards. The servers are closed (and their sandboxes removed) at once. Default: write tools get no tasks.
   */
  isolatedServer?: () => Promise<ScenarioServer & { close(): Promise<void> }>;
}

export interface OfflineResult {
  scenarios: Scenario[];
  /** Candidates dropped as duplicates (same checks, or near-duplicate task text). */
  droppedDuplicates: number;
  /** Candidates dropped because a call failed or the replay did not reproduce the expected values. */
  droppedUnverifiable: number;
  /** Candidates outside the requested partition or hitting `exclude`. */
  droppedExcluded: number;
  attempts: number;
  /** Tools used for generation (read-only ones). */
  readOnlyTools: string[];
  /** Per tool of the server: scenarios made, and for a tool with none, why. */
  coverage: ToolCoverage[];
  /**
   * What discovery found that names a thing on the server (ids, names, labels, paths, uris…), each with the
   * read-only tool whose result showed it first, in the order found. `count: 0` runs discovery alone.
   */
  entities: DiscoveredEntity[];
}

/** A value that names a thing on the server, with the read-only tool whose result showed it. */
export interface DiscoveredEntity {
  /** The key it was found under ("id", "book_id", "name", "path"). */
  key: string;
  value: Scalar;
  tool: string;
}

type Scalar = string | number | boolean;

interface EntityRecord {
  /** What the record is, singular ("book", "author"). */
  noun: string;
  fields: Record<string, Scalar>;
  /** Its short lists of strings (server-memory's observations): what can name it without its label. */
  lists?: Record<string, string[]>;
}

interface Candidate {
  task: string;
  difficulty: number;
  checks: Check[];
  /** Already replayed on isolated servers (write tasks): the read-only replay is not for it. */
  verified?: boolean;
}

const VERBS = new Set(['get', 'list', 'search', 'find', 'fetch', 'check', 'read', 'show', 'query', 'lookup', 'retrieve', 'describe', 'view']);
const LABEL_KEYS = ['title', 'name', 'label', 'display_name', 'displayName', 'full_name', 'fullName'];
const SEARCH_NAMES = /^(q|query|search|keyword|keywords|term|terms|text|filter|prefix)$/i;
const SECRET_KEYS = /key|token|secret|password|passwd|auth|credential|cookie|session/i;
/** Parameters that name an existing thing to act on (a file to move or delete). */
const REF_NAMES = /^(source|src|from_?path|old_?path)$/i;
/** Parameters that take a glob (server-filesystem's search_files `pattern`): built from discovered file names. */
const GLOB_NAMES = /^(pattern|glob|glob_?pattern|file_?pattern|include)$/i;
/** Parameters that take text to be replaced (an edit's `oldText`): a line of the content discovered for the path. */
const OLD_TEXT_NAMES = /^(old|original|search|find|from|match)_?(text|string|str|content|line|value)$/i;
/** Parameters that name a new thing (where a file is moved or written to). */
const NEW_PATH_NAMES = /^(destination|dest|target|to_?path|new_?path)$/i;
/** Keys whose values name an entity, so that they are worth feeding back as arguments of other tools. */
const ENTITY_KEYS = new Set(['id', 'isbn', 'sku', 'key', 'name', 'path', 'uri', 'url', 'email', 'slug', 'handle', 'username', 'filename']);
/** Values that differ between two copies of the same data (file times) make no stable ground truth. */
const UNSTABLE_KEYS = /(^|_|\b)(accessed|modified|created|mtime|atime|ctime|birthtime|timestamp|time|date)s?$/i;
/** Text that is an error message although the server did not set isError (ENOENT as text, "not found"). */
const ERROR_TEXT =
  /^(error|failed|failure|exception|invalid|unknown|cannot|can't|could not|couldn't|unable|no such|not found|access denied|permission denied|forbidden|unauthori[sz]ed)\b|\b(ENOENT|EACCES|EPERM|ENOTDIR|EISDIR|EEXIST)\b|\b(not found|does not exist|doesn't exist|no such file|outside (the )?allowed|access denied|permission denied|no (matches|results)( found)?|nothing found)\b|^[^\n]{0,300}:\s*Error\b/im;

// ------------------------------------------------------------------------------------------------ words

function words(name: string): string[] {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .split(/[^A-Za-z0-9]+/)
    .map((w) => w.toLowerCase())
    .filter(Boolean);
}

function singular(w: string): string {
  if (/ies$/.test(w) && w.length > 4) return w.slice(0, -3) + 'y';
  if (/(ss|us)$/.test(w)) return w;
  if (/(xes|ches|shes)$/.test(w)) return w.slice(0, -2);
  if (/s$/.test(w) && w.length > 3) return w.slice(0, -1);
  return w;
}

/** The thing a tool is about: get_book → "book", list_authors → "author". */
function toolNoun(tool: string): string {
  const ws = words(tool).filter((w) => !VERBS.has(w));
  return singular(ws[ws.length - 1] ?? words(tool)[0] ?? 'item');
}

/** "book_id" / "bookId" → "book"; "id" → undefined. Undefined too for names that are not ids. */
function idStem(name: string): string | undefined {
  const ws = words(name);
  if (ws.length < 2 || ws[ws.length - 1] !== 'id') return undefined;
  return singular(ws[ws.length - 2]);
}

function isIdName(name: string): boolean {
  return name.toLowerCase() === 'id' || idStem(name) !== undefined;
}

/** Units and currencies that end field names: "price_usd" reads "price in USD", "height_cm" "height in cm". */
const UNITS: Record<string, string> = { usd: 'USD', eur: 'EUR', gbp: 'GBP', jpy: 'JPY', cm: 'cm', mm: 'mm', km: 'km', kg: 'kg', ms: 'milliseconds', sec: 'seconds', pct: 'percent' };

/** A field name in words, as a person would say it. */
export function label(key: string): string {
  const ws = words(key);
  const unit = ws.length >= 2 ? UNITS[ws[ws.length - 1]] : undefined;
  return unit ? `${ws.slice(0, -1).join(' ')} in ${unit}` : ws.join(' ');
}

/** Field names that are bare prepositions ("to", "from" of a relation) say nothing as a question. */
const VAGUE_FIELDS = /^(to|from|of|in|at|by|on|for|type)$/i;

function fmt(v: unknown): string {
  if (typeof v === 'string') return `"${v}"`;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  return JSON.stringify(v);
}

function argsPhrase(args: Record<string, unknown>): string {
  const parts = Object.entries(args).map(([k, v]) => `${label(k)} ${fmt(v)}`);
  if (parts.length <= 1) return parts.join('');
  return `${parts.slice(0, -1).join(', ')} and ${parts[parts.length - 1]}`;
}

function actionPhrase(tool: ToolInfo): string {
  // Titles such as "Echo Tool" read better without the trailing "Tool".
  // Title-case words read as common words mid-sentence ("Read Multiple Files" → "read multiple files"); acronyms stay.
  const t = (tool.title ?? words(tool.name).join(' ')).replace(/\s*\([^)]*\)/g, '').replace(/\s+tool$/i, '');
  return t.split(' ').map((w) => (/^[A-Z][a-z]+$/.test(w) ? w.toLowerCase() : w)).join(' ');
}

function capitalise(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

// ------------------------------------------------------------------------------------------------ templates

type Fill = Record<string, string>;

/** Phrasing templates; `{x}` is replaced from the fill. Each family has 8, so 4 partitions (warm-up, train,
 * validation, test) get 2 apiece, and 2 or 3 partitions get 4 or 2–3. */
const TEMPLATES = {
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

type TemplateFamily = keyof typeof TEMPLATES;

// ------------------------------------------------------------------------------------------------ output parsing

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
function textWrapper(o: ToolCallOutcome): string | undefined {
  const sc = o.structuredContent;
  if (!isPlainObject(sc)) return undefined;
  const values = Object.values(sc);
  return values.length === 1 && typeof values[0] === 'string' ? values[0] : undefined;
}

/** The result as text: the wrapped string when structuredContent only wraps one, else the text the model reads. */
function resultText(o: ToolCallOutcome): string {
  return (textWrapper(o) ?? o.text).trim();
}

/** [] / {} / null / "", or an object whose every value is empty ({"entities": [], "relations": []}). */
function isEmpty(v: unknown): boolean {
  if (v === null || v === undefined || v === '') return true;
  if (Array.isArray(v)) return v.length === 0;
  if (isPlainObject(v)) return Object.values(v).every(isEmpty);
  return false;
}

/** Plain text that is a listing of `key: value` lines (two or more) reads as an object. */
function keyValueLines(text: string): Record<string, string> | undefined {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
  const pairs = lines.map((l) => /^([A-Za-z][\w ]{0,40}):\s+(.+)$/.exec(l));
  if (lines.length < 2 || pairs.some((m) => !m)) return undefined;
  return Object.fromEntries(pairs.map((m) => [m![1].trim(), m![2].trim()]));
}

/** Lines such as "[FILE] notes.txt" / "[DIR] src" (a directory listing) as {type, name} entries. */
function listingLines(text: string): { type: string; name: string }[] | undefined {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
  const entries = lines.map((l) => /^\[([A-Za-z]+)\]\s+(.+?)(?:\s{2,}.*)?$/.exec(l));
  if (!lines.length || entries.some((m) => !m)) return undefined;
  return entries.map((m) => ({ type: m![1].toLowerCase(), name: m![2] }));
}

/** The last word of a parameter name, singular: "names" → "name", "entityName" → "name", "paths" → "path". */
function entityKey(param: string): string | undefined {
  const w = singular(words(param).pop() ?? '');
  return ENTITY_KEYS.has(w) ? w : undefined;
}

function outcomeData(o: ToolCallOutcome): unknown {
  if (o.structuredContent !== undefined && textWrapper(o) === undefined) return o.structuredContent;
  const t = resultText(o);
  if (t.startsWith('{') || t.startsWith('[')) {
    try {
      return JSON.parse(t);
    } catch {
      return undefined;
    }
  }
  return listingLines(t) ?? keyValueLines(t);
}

function isScalar(v: unknown): v is Scalar {
  return typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v)) || typeof v === 'boolean';
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** Scalar leaves outside arrays, with their key path. */
function leaves(data: unknown, path: string[] = []): { path: string[]; value: Scalar }[] {
  if (!isPlainObject(data)) return [];
  const out: { path: string[]; value: Scalar }[] = [];
  for (const [k, v] of Object.entries(data)) {
    if (isScalar(v)) out.push({ path: [...path, k], value: v });
    else if (isPlainObject(v) && path.length < 2) out.push(...leaves(v, [...path, k]));
  }
  return out;
}

/** Every object with at least two scalar fields anywhere in `data`, with a noun guessed from its context. */
function records(data: unknown, tool: string, parentKey?: string, out: EntityRecord[] = []): EntityRecord[] {
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

function stringLists(o: Record<string, unknown>): { lists?: Record<string, string[]> } {
  const lists = Object.entries(o).filter((e): e is [string, string[]] => Array.isArray(e[1]) && e[1].length > 0 && e[1].every((x) => typeof x === 'string'));
  return lists.length ? { lists: Object.fromEntries(lists) } : {};
}

function scalarFields(o: Record<string, unknown>): Record<string, Scalar> {
  const f: Record<string, Scalar> = {};
  for (const [k, v] of Object.entries(o)) if (isScalar(v)) f[k] = v;
  return f;
}

function recordLabel(r: EntityRecord): { key: string; value: string } | undefined {
  for (const k of LABEL_KEYS) {
    const v = r.fields[k];
    if (typeof v === 'string' && v.length >= 2 && v.length <= 60) return { key: k, value: v };
  }
  return undefined;
}

function scalarArgValues(args: unknown, out = new Set<string>()): Set<string> {
  if (isScalar(args)) out.add(String(args).trim().toLowerCase());
  else if (Array.isArray(args)) for (const x of args) scalarArgValues(x, out);
  else if (isPlainObject(args)) for (const v of Object.values(args)) scalarArgValues(v, out);
  return out;
}

type Answer =
  | { kind: 'field'; field: string; values: string[] }
  | { kind: 'list'; field: string; noun: string; values: string[] }
  | { kind: 'values'; field: string; values: string[] };

/** Chooses what to ask about from a tool's real output; undefined when nothing checkable is there. */
function chooseAnswer(o: ToolCallOutcome, args: Record<string, unknown>, tool: ToolInfo, rng: Rng): Answer | undefined {
  const data = outcomeData(o);
  const argValues = scalarArgValues(args);
  const usable = (key: string, v: Scalar): boolean => {
    // Secrets must not land in scenario files; ALL_CAPS keys are environment variables, which differ per machine.
    if (typeof v === 'boolean' || SECRET_KEYS.test(key) || UNSTABLE_KEYS.test(key) || VAGUE_FIELDS.test(key) || /^[A-Z][A-Z0-9_]*$/.test(key)) return false;
    const s = String(v).trim();
    // "true"/"false" as text is as unspecific an answer as a boolean.
    return s.length >= 2 && s.length <= 60 && !argValues.has(s.toLowerCase()) && !/\n/.test(s) && !/^(true|false)$/i.test(s);
  };
  // An image or audio result: its MIME type is what it says for sure (the model reads "[image: image/png, 70 bytes]").
  const media = o.media?.[0];
  if (media) return { kind: 'field', field: `MIME type of the ${media.type}`, values: [media.mimeType] };
  const options: Answer[] = [];
  if (data !== undefined) {
    for (const leaf of leaves(data)) {
      const key = leaf.path[leaf.path.length - 1];
      if (usable(key, leaf.value)) options.push({ kind: 'field', field: label(leaf.path.join(' ')), values: [String(leaf.value)] });
    }
    const arrays: [string, unknown[]][] = Array.isArray(data) ? [[toolNoun(tool.name), data]] : isPlainObject(data) ? Object.entries(data).filter((e): e is [string, unknown[]] => Array.isArray(e[1])) : [];
    for (const [key, arr] of arrays) {
      if (arr.length < 1 || arr.length > 4) continue;
      const noun = Array.isArray(data) || /^(results?|items?|data|matches)$/i.test(key) ? toolNoun(tool.name) : singular(words(key).pop() ?? key);
      // A lookup that found exactly one record: its fields, and its short lists, are what to ask about.
      if (arr.length === 1 && isPlainObject(arr[0])) {
        for (const [k, v] of Object.entries(arr[0])) {
          if (isScalar(v) && usable(k, v)) options.push({ kind: 'field', field: label(k), values: [String(v)] });
          if (Array.isArray(v) && v.length >= 1 && v.length <= 4 && v.every((x) => isScalar(x) && usable(k, x))) {
            options.push({ kind: 'values', field: label(k), values: v.map(String) });
          }
        }
      }
      if (arr.every(isPlainObject)) {
        const lk = LABEL_KEYS.find((k) => arr.every((x) => typeof (x as Record<string, unknown>)[k] === 'string'));
        if (lk) {
          const values = arr.map((x) => String((x as Record<string, unknown>)[lk]));
          if (values.every((v) => usable(lk, v))) options.push({ kind: 'list', field: label(lk), noun, values });
        }
      } else if (arr.every(isScalar) && arr.every((v) => usable(key, v as Scalar))) {
        options.push({ kind: 'values', field: label(key), values: arr.map(String) });
      }
    }
    return options.length ? rng.pick(options) : undefined;
  }
  // Plain text: a number the call produced (not one we passed in), else the whole short reply.
  const text = resultText(o);
  // Lines that are each a path (what a file search returns) are asked for as the paths found, like any listing.
  // Resources (or links to them) the call made or lists: one's MIME type or URI, or the URIs of a few, as the
  // reply's summary lines state them ("[resource link: demo://resource/session/x.gz (x.gz), application/gzip]").
  const resources = [...text.matchAll(/^\[resource(?: link)?: (\S+?)(?: \([^)]*\))?(?:, ([\w.+-]+\/[\w.+-]+))?(?:, [^\]]*)?\]$/gm)];
  if (resources.length === 1) {
    const [, uri, mime] = resources[0];
    const options: Answer[] = [];
    if (mime) options.push({ kind: 'field', field: 'MIME type of the resource', values: [mime] });
    if (!argValues.has(uri.toLowerCase())) options.push({ kind: 'field', field: 'URI of the resource', values: [uri] });
    if (options.length) return rng.pick(options);
  }
  const uris = resources.map((m) => m[1]).filter((u) => !argValues.has(u.toLowerCase()));
  if (uris.length >= 2 && uris.length <= 4) return { kind: 'values', field: 'resource URIs', values: uris };
  // A switch says what it did first ("Started simulated logging…", "Stopped …"): that word is the answer.
  const switched = /^(started|stopped|enabled|disabled|paused|resumed)\b/i.exec(text);
  if (switched) {
    return { kind: 'field', field: 'new state', values: [switched[1]] };
  }
  // A heading line ("Allowed directories:") names what the paths under it are.
  const all = text.split('\n').map((l) => l.trim()).filter(Boolean);
  const heading = all.length >= 2 && /^[A-Za-z][A-Za-z ]{2,40}:$/.test(all[0]) ? all[0].slice(0, -1).toLowerCase() : undefined;
  const lines = heading ? all.slice(1) : all;
  if (lines.length <= 4 && lines.every((l) => l.length <= 200 && /^(\{sandbox\}|\/)\S*$/.test(l) && !argValues.has(l.toLowerCase()))) {
    return { kind: 'values', field: heading ?? 'matching paths', values: lines };
  }
  // Only an unambiguous number counts: exactly one distinct number in the reply that we did not pass in.
  const nums = [...new Set((text.match(/-?\d+(?:\.\d+)?/g) ?? []).filter((n) => !argValues.has(n)))];
  if (nums.length === 1) return { kind: 'field', field: 'result', values: nums };
  if (text.length >= 2 && text.length <= 80 && !text.includes('\n') && !text.startsWith('[')) return { kind: 'field', field: 'exact response', values: [text] };
  return undefined;
}

// ------------------------------------------------------------------------------------------------ generator

/** Generates verifiable scenarios from a server's read-only tools. Never calls any other tool. */
export async function generateOfflineScenarios(userServer: ScenarioServer, opts: OfflineOptions = {}): Promise<OfflineResult> {
  const server = withPlaceholder(userServer);
  const count = opts.count ?? 24;
  const seed = opts.seed ?? 1;
  const partition = opts.partition;
  if (partition && !(Number.isInteger(partition.of) && partition.of >= 1 && partition.index >= 0 && partition.index < partition.of)) {
    throw new RangeError(`partition must satisfy 0 <= index < of, got ${JSON.stringify(partition)}`);
  }
  const rng = createRng(seed);
  const callTimeoutMs = opts.callTimeoutMs ?? 10_000;
  const maxAttempts = opts.maxAttempts ?? (10 * count + 50) * (partition?.of ?? 1);

  const allTools = await server.listTools();
  // Tools left out from the start, and for the others the furthest stage a candidate of theirs reached.
  const excluded = new Map<string, { reason: NoScenarioReason; detail?: string }>();
  const furthest = new Map<string, number>();
  /** The last error of each tool whose calls failed: the report's detail when that is why it has no scenario. */
  const lastError = new Map<string, string>();
  const note = (tool: string, reason: NoScenarioReason, detail?: string) => {
    const i = STAGES.indexOf(reason);
    if (i > (furthest.get(tool) ?? -1)) furthest.set(tool, i);
    if (reason === 'calls_failed' && detail) lastError.set(tool, oneLine(detail).slice(0, 200));
  };
  const tools: ToolInfo[] = [];
  const writeTools: ToolInfo[] = [];
  for (const t of allTools) {
    if (server.policy && !server.policy.check(t, { isolated: true }).allowed) excluded.set(t.name, { reason: 'refused_by_policy' });
    else if (t.annotations.readOnlyHint !== true && !opts.isolatedServer) excluded.set(t.name, { reason: 'writes_state', detail: 'write tasks need --isolate on a {sandbox} or --state-in-memory' });
    else if (t.annotations.readOnlyHint !== true) writeTools.push({ ...t, inputSchema: safeResolve(t.inputSchema) });
    else tools.push({ ...t, inputSchema: safeResolve(t.inputSchema) });
  }
  const byName = new Map(tools.map((t) => [t.name, t]));
  const disabled = new Set<string>();

  // The only way this module calls the server: read-only tools, bounded time, cached within generation.
  const cache = new Map<string, ToolCallOutcome>();
  const call = async (name: string, args: Record<string, unknown>, fresh = false): Promise<ToolCallOutcome> => {
    const tool = byName.get(name);
    if (!tool || tool.annotations.readOnlyHint !== true) {
      // Generation only ever picks read-only tools; getting here is a bug, and calling the tool could change data.
      throw new McprlError('READ_ONLY_VIOLATION', `refusing to call ${name} while generating scenarios: it is not annotated readOnlyHint: true`);
    }
    const key = `${name} ${canonical(args)}`;
    if (!fresh && cache.has(key)) return cache.get(key)!;
    let out = await server.callTool(name, args, { timeoutMs: callTimeoutMs });
    if (out.isError && out.latencyMs >= callTimeoutMs * 0.9) {
      disabled.add(name);
      excluded.set(name, { reason: 'timed_out', detail: `after ${callTimeoutMs} ms` });
    }
    // An error in disguise is an error: it is never harvested nor made a ground truth.
    if (!out.isError && disguisedError(out)) out = { ...out, isError: true };
    if (!fresh) cache.set(key, out);
    return out;
  };

  // 1. Discover entities.
  const recs: EntityRecord[] = [];
  const keyValues = new Map<string, Scalar[]>();
  // Strings listed under a key (server-memory's observations): what a destructive write may name to remove.
  const listValues = new Map<string, Scalar[]>();
  /** Plain-text results of calls on one path (a file's content), by that path. */
  const contentOf = new Map<string, { tool: string; args: Record<string, unknown>; text: string }>();
  /** Paths that a listing showed to be folders (their "content" is no file's). */
  const folders = new Set<string>();
  let harvested = 0;
  const entities: DiscoveredEntity[] = [];
  const harvest = (tool: string, args: Record<string, unknown>, o: ToolCallOutcome) => {
    if (o.isError) return;
    const keep = (k: string, v: Scalar) => {
      const before = keyValues.get(k)?.length ?? 0;
      push(keyValues, k, v);
      if ((keyValues.get(k)?.length ?? 0) === before) return;
      harvested++;
      if (isIdName(k) || ENTITY_KEYS.has(k) || LABEL_KEYS.includes(k)) entities.push({ key: k, value: v, tool });
    };
    const data = outcomeData(o);
    for (const r of records(data, tool)) {
      recs.push(r);
      for (const [k, v] of Object.entries(r.fields)) keep(k, v);
    }
    for (const l of leaves(data)) keep(l.path[l.path.length - 1], l.value);
    // Every object anywhere in the result: its entity-like keys (name, path, uri, email, …) are worth trying.
    walkObjects(data, (obj) => {
      for (const [k, v] of Object.entries(obj)) {
        if (Array.isArray(v)) for (const x of v) if (typeof x === 'string' && x.length <= 200) push(listValues, k, x);
        const ek = entityKey(k);
        if (ek && typeof v === 'string' && v.length <= 200) keep(ek, v);
      }
    });
    // Absolute paths in plain text, and the entries of a listing below the folder it was asked about.
    if (data === undefined) {
      // What a tool that lists folders and takes no path names (list_allowed_directories) shows are folders.
      const listsFolders = /\b(director(y|ies)|folders?)\b/.test(words(tool).join(' ')) && !Object.keys(args).some((k) => entityKey(k) === 'path');
      for (const m of resultText(o).matchAll(/(?:^|\s)(\{sandbox\}(?:\/[^\s:,'"()]+)?|\/[^\s:,'"()]+)/g)) {
        keep('path', m[1]);
        if (listsFolders) folders.add(m[1]);
      }
    }
    const folder = Object.entries(args).find(([k, v]) => entityKey(k) === 'path' && typeof v === 'string')?.[1] as string | undefined;
    const listing = listingLines(resultText(o));
    if (folder && listing) {
      folders.add(folder);
      for (const e of listing) {
        keep('path', `${folder.replace(/\/+$/, '')}/${e.name}`);
        if (/^dir/.test(e.type)) folders.add(`${folder.replace(/\/+$/, '')}/${e.name}`);
      }
    }
    // The plain text a tool gave for a path (a file's content): what an edit may replace, and what names the file.
    if (folder && data === undefined && !contentOf.has(folder)) contentOf.set(folder, { tool, args, text: resultText(o) });
  };
  for (const tool of tools) {
    for (const args of discoveryArgs(tool)) {
      if (disabled.has(tool.name)) break;
      harvest(tool.name, args, await call(tool.name, args));
    }
  }

  /** Up to `n` argument sets whose required values all come from discovery (never invented). */
  function knownArgSets(tool: ToolInfo, n: number): Record<string, unknown>[] {
    const props = (tool.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
    const required = requiredNames(tool);
    if (!required.length) return [];
    const options: unknown[][] = [];
    for (const r of required) {
      const s = props[r];
      if (!s) return [];
      let opts: unknown[] = [];
      if (Array.isArray(s.enum)) opts = [s.enum[0]];
      else if (SEARCH_NAMES.test(r) && (s.type === 'string' || s.type === undefined)) opts = [''];
      else if (s.type === 'array' || s.type === 'object') {
        // A required object or array is synthesized from its schema with discovered values, and kept only when
        // every string in it was discovered.
        for (let i = 0; i < n * 3 && opts.length < n; i++) {
          try {
            const v = synthesizeArgs({ type: 'object', properties: { [r]: s }, required: [r] }, { rng, optionalRate: 0, candidates: candidates(tool) })[r];
            if (allStringsKnown(v) && !opts.some((o) => canonical(o) === canonical(v))) opts.push(v);
          } catch {
            break;
          }
        }
      } else opts = (candidates(tool)({ name: r, path: [r], schema: s }) ?? []).filter((v) => validates(s, v));
      if (!opts.length) return [];
      options.push(opts);
    }
    const sets: Record<string, unknown>[] = [];
    for (let i = 0; i < n; i++) {
      const args = Object.fromEntries(required.map((r, j) => [r, options[j][i % options[j].length]]));
      if (validates(tool.inputSchema, args) && !sets.some((a) => canonical(a) === canonical(args))) sets.push(args);
    }
    return sets;
  }

  function allStringsKnown(v: unknown): boolean {
    if (typeof v === 'string') return [...keyValues.values()].some((xs) => xs.includes(v));
    if (Array.isArray(v)) return v.length > 0 && v.every(allStringsKnown);
    if (isPlainObject(v)) return Object.values(v).every(allStringsKnown);
    return true;
  }

  function idCandidates(name: string, tool: ToolInfo): Scalar[] {
    const stem = idStem(name) ?? toolNoun(tool.name);
    const out: Scalar[] = [];
    for (const r of recs) {
      if (r.noun === stem && r.fields.id !== undefined) out.push(r.fields.id);
      for (const [k, v] of Object.entries(r.fields)) if (idStem(k) === stem) out.push(v);
    }
    out.push(...(keyValues.get(name) ?? []));
    return [...new Set(out)];
  }

  const candidates = (tool: ToolInfo) => (ctx: CandidateContext): readonly unknown[] | undefined => {
    const name = ctx.name;
    if (!name) return undefined;
    const fixed = fixedCandidates(name, ctx.schema);
    if (fixed) return fixed;
    if (isIdName(name)) {
      const c = idCandidates(name, tool);
      return c.length ? c : undefined;
    }
    const ek = entityKey(name);
    if (ek === 'path' || name === 'path') {
      const paths = pathsFor(tool, keyValues.get(name) ?? keyValues.get('path') ?? []);
      if (paths.length) return paths;
    } else {
      const exact = keyValues.get(name);
      if (exact?.length) return exact;
      const byKey = ek ? keyValues.get(ek) : undefined;
      if (byKey?.length) return byKey;
    }
    if (GLOB_NAMES.test(name) || /\bglob\b/i.test(String(ctx.schema.description ?? ''))) {
      const globs = globsOf(keyValues.get('path') ?? []);
      if (globs.length) return globs;
    }
    if (SEARCH_NAMES.test(name)) {
      const ws = recs.flatMap((r) => (recordLabel(r)?.value.split(/\s+/) ?? []).filter((w) => w.length >= 4));
      return ws.length ? ws : undefined;
    }
    return undefined;
  };

  /**
   * The discovered paths a tool's path argument may take: folders for a tool about folders (list_directory,
   * directory_tree, search_files' starting folder), files for one about files, media files first for one that reads
   * media; all of them when the tool says neither (or when none of the kind is known).
   */
  function pathsFor(tool: ToolInfo, paths: readonly Scalar[]): Scalar[] {
    const kind = pathKind(tool);
    const isFolder = (p: Scalar) => folders.has(String(p));
    if (kind === 'folder') {
      const fs = paths.filter(isFolder);
      return fs.length ? fs : [...paths];
    }
    if (kind !== 'file') return [...paths];
    const files = paths.filter((p) => !isFolder(p));
    const media = files.filter((p) => MEDIA_FILE.test(String(p)));
    if (/\b(media|image|audio)\b/.test(words(tool.name).join(' '))) return media.length ? media : files;
    const text = files.filter((p) => !MEDIA_FILE.test(String(p)));
    return text.length ? text : files;
  }

  // Further rounds, to a bound: every read-only tool whose required arguments can all be filled from what is known
  // now (a listed id, a harvested name or path, a synthesized object of known values) is called and harvested,
  // until a round finds nothing new.
  for (let round = 0; round < DISCOVERY_ROUNDS; round++) {
    harvested = 0;
    for (const tool of tools) {
      for (const args of knownArgSets(tool, DISCOVERY_CALLS_PER_TOOL)) {
        if (disabled.has(tool.name)) break;
        harvest(tool.name, args, await call(tool.name, args));
      }
    }
    if (harvested === 0) break;
  }
  dedupeRecords(recs);

  const templates = (family: TemplateFamily): readonly string[] =>
    partition ? TEMPLATES[family].filter((_, i) => i % partition.of === partition.index) : TEMPLATES[family];
  const render = (family: TemplateFamily, fill: Fill): string => {
    const tpl = rng.pick(templates(family));
    return tpl.replace(/\{(\w+)\}/g, (_, k: string) => {
      const lower = k.charAt(0).toLowerCase() + k.slice(1);
      const v = fill[lower] ?? '';
      return k === lower ? v : capitalise(v);
    });
  };

  const usableTools = () => tools.filter((t) => !disabled.has(t.name));

  /** How many candidates were drawn for each tool: a tool is picked among those tried least, so none is left out. */
  const tried = new Map<string, number>();
  const leastTried = (pool: readonly ToolInfo[]): ToolInfo => {
    const fewest = Math.min(...pool.map((t) => tried.get(t.name) ?? 0));
    const tool = rng.pick(pool.filter((t) => (tried.get(t.name) ?? 0) === fewest));
    tried.set(tool.name, fewest + 1);
    return tool;
  };
  /** Argument sets that failed, per tool (`tool args`): a later draw takes others. */
  const failedArgs = new Set<string>();

  // 2a. lookup: one call with stated arguments (`forced`: of this tool). Arguments that fail are drawn again.
  async function lookup(forced?: ToolInfo): Promise<Candidate | 'unverifiable' | undefined> {
    const pool = usableTools();
    if (!pool.length) return undefined;
    const tool = forced ?? leastTried(pool);
    let args: Record<string, unknown> = {};
    let out: ToolCallOutcome | undefined;
    for (let draw = 0; draw < ARG_DRAWS && !disabled.has(tool.name); draw++) {
      try {
        args = withFixed(tool.inputSchema, synthesizeArgs(tool.inputSchema, { rng, optionalRate: 0.3, candidates: candidates(tool) }));
      } catch {
        note(tool.name, 'no_discoverable_arguments');
        return undefined;
      }
      const key = `${tool.name} ${canonical(args)}`;
      if (failedArgs.has(key)) continue;
      out = await call(tool.name, args);
      if (!out.isError) break;
      failedArgs.add(key);
    }
    if (!out || out.isError) {
      note(tool.name, 'calls_failed', out?.text);
      return 'unverifiable';
    }
    const answer = chooseAnswer(out, args, tool, rng);
    const keys = Object.keys(args);
    const argText = keys.length ? argsPhrase(args) : 'no arguments';
    const check: Check = { kind: 'tool_called', tool: tool.name, args };
    if (!answer) {
      if (!keys.length) {
        note(tool.name, 'nothing_to_ask');
        return undefined; // "do X with no arguments" and nothing to check in the answer: too vague.
      }
      return { task: render('actionOnly', { action: actionPhrase(tool), args: argText }), difficulty: 1, checks: [check] };
    }
    return asked(tool, args, answer);
  }

  /** The task that asks for `answer` from a call of `tool` with `args`, and its checks. */
  function asked(tool: ToolInfo, args: Record<string, unknown>, answer: Answer): Candidate {
    const keys = Object.keys(args);
    const argText = keys.length ? argsPhrase(args) : 'no arguments';
    const check: Check = { kind: 'tool_called', tool: tool.name, args };
    const single = keys.length === 1 && isIdName(keys[0]) && typeof args[keys[0]] === 'string';
    let task: string;
    if (answer.kind === 'list') task = render('actionList', { action: actionPhrase(tool), args: argText, field: answer.field, noun: answer.noun });
    else if (answer.kind === 'values') task = keys.length ? render('actionValues', { action: actionPhrase(tool), args: argText, field: answer.field }) : render('noArgsValues', { action: actionPhrase(tool), field: answer.field });
    else if (single) task = render('field', { field: answer.field, subject: `the ${idStem(keys[0]) ?? toolNoun(tool.name)} ${args[keys[0]] as string}` });
    else if (keys.length) task = render('actionField', { action: actionPhrase(tool), args: argText, field: answer.field });
    else task = render('noArgsField', { action: actionPhrase(tool), field: answer.field });
    const difficulty = answer.kind !== 'field' || keys.length >= 2 ? 2 : 1;
    return { task, difficulty, checks: [check, ...answer.values.map((value) => ({ kind: 'answer_contains' as const, value }))] };
  }

  // Labels that identify exactly one record, so a task can name an entity instead of giving its id.
  const labelled = (): { rec: EntityRecord; label: string }[] => {
    const counts = new Map<string, number>();
    for (const r of recs) {
      const l = recordLabel(r)?.value.toLowerCase();
      if (l) counts.set(l, (counts.get(l) ?? 0) + 1);
    }
    return recs.flatMap((rec) => {
      const l = recordLabel(rec);
      return l && counts.get(l.value.toLowerCase()) === 1 ? [{ rec, label: l.value }] : [];
    });
  };
  let labelledCache: { rec: EntityRecord; label: string }[] | undefined;

  /** Tools whose only required argument is an id of `noun`. */
  const idTools = (noun: string): { tool: ToolInfo; param: string }[] =>
    usableTools().flatMap((tool) => {
      const req = requiredNames(tool);
      if (req.length !== 1) return [];
      const p = req[0];
      const stem = idStem(p) ?? (p.toLowerCase() === 'id' ? toolNoun(tool.name) : undefined);
      return stem === noun ? [{ tool, param: p }] : [];
    });

  interface ChainStart {
    subject: string;
    tool: ToolInfo;
    args: Record<string, unknown>;
    out: ToolCallOutcome;
    hops: number;
  }

  // An entity named by its label, resolved to an id that a single-id tool takes.
  async function chainStart(): Promise<ChainStart | 'unverifiable' | undefined> {
    labelledCache ??= labelled();
    if (!labelledCache.length) return undefined;
    const { rec, label: name } = rng.pick(labelledCache);
    const links: { field: string; noun: string; hops: number }[] = [];
    if (rec.fields.id !== undefined) links.push({ field: 'id', noun: rec.noun, hops: 1 });
    for (const k of Object.keys(rec.fields)) {
      const stem = idStem(k);
      if (stem) links.push({ field: k, noun: stem, hops: stem === rec.noun ? 1 : 2 });
    }
    const options = links.flatMap((l) => idTools(l.noun).map((t) => ({ ...l, ...t })));
    if (!options.length) return undefined;
    const pick = rng.pick(options);
    const args = { [pick.param]: rec.fields[pick.field] };
    if (!validates(pick.tool.inputSchema, args)) return undefined;
    const out = await call(pick.tool.name, args);
    if (out.isError) {
      note(pick.tool.name, 'calls_failed');
      return 'unverifiable';
    }
    const subject = pick.hops === 1 ? `the ${rec.noun} "${name}"` : `the ${label(pick.noun)} of the ${rec.noun} "${name}"`;
    return { subject, tool: pick.tool, args, out, hops: pick.hops };
  }

  // 2b. chain: find the id from a label, then use it.
  async function chain(): Promise<Candidate | 'unverifiable' | undefined> {
    const start = await chainStart();
    if (!start || start === 'unverifiable') return start;
    const answer = chooseAnswer(start.out, start.args, start.tool, rng);
    if (!answer || answer.kind !== 'field') {
      note(start.tool.name, 'nothing_to_ask');
      return undefined;
    }
    const task = render('field', { field: answer.field, subject: start.subject });
    return {
      task,
      difficulty: 2 + start.hops,
      checks: [{ kind: 'tool_called', tool: start.tool.name, args: start.args }, ...answer.values.map((value) => ({ kind: 'answer_contains' as const, value }))],
    };
  }

  // 2c. flow: a number from one output becomes another tool's argument.
  async function flow(): Promise<Candidate | 'unverifiable' | undefined> {
    const start = await chainStart();
    if (!start || start === 'unverifiable') return start;
    const nums = leaves(outcomeData(start.out)).filter((l) => typeof l.value === 'number');
    const options: { key: string; value: number; tool: ToolInfo; param: string }[] = [];
    for (const n of nums) {
      const key = n.path[n.path.length - 1];
      const keyWords = new Set(words(key).filter((w) => w !== 'id' && w.length >= 3));
      for (const tool of usableTools()) {
        if (tool.name === start.tool.name) continue;
        const props = (tool.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
        for (const p of requiredNames(tool)) {
          const ps = props[p];
          if (!ps || (ps.type !== 'number' && ps.type !== 'integer')) continue;
          const pWords = [...words(p), ...words(String(ps.description ?? ''))];
          if (pWords.some((w) => keyWords.has(w)) && validates(ps, n.value)) options.push({ key, value: n.value as number, tool, param: p });
        }
      }
    }
    if (!options.length) return undefined;
    const pick = rng.pick(options);
    let rest: Record<string, unknown>;
    try {
      const full = synthesizeArgs(pick.tool.inputSchema, { rng, optionalRate: 0, candidates: candidates(pick.tool) });
      rest = Object.fromEntries(Object.entries(full).filter(([k]) => k !== pick.param));
    } catch {
      return undefined;
    }
    const args = { ...rest, [pick.param]: pick.value };
    if (!validates(pick.tool.inputSchema, args)) return undefined;
    const out = await call(pick.tool.name, args);
    if (out.isError) {
      note(pick.tool.name, 'calls_failed');
      return 'unverifiable';
    }
    const answer = chooseAnswer(out, args, pick.tool, rng);
    if (!answer || answer.kind !== 'field') {
      note(pick.tool.name, 'nothing_to_ask');
      return undefined;
    }
    const task = render('flow', {
      first: label(pick.key),
      subject: start.subject,
      action: actionPhrase(pick.tool),
      param: label(pick.param),
      rest: Object.keys(rest).length ? ` and ${argsPhrase(rest)}` : '',
      field: answer.field,
    });
    return {
      task,
      difficulty: Math.min(5, 3 + start.hops),
      checks: [
        { kind: 'tool_called', tool: start.tool.name, args: start.args },
        { kind: 'tool_called', tool: pick.tool.name, args },
        ...answer.values.map((value) => ({ kind: 'answer_contains' as const, value })),
      ],
    };
  }

  // 2d. write: a change asked for in plain words, replayed by a scripted solver on an isolated server, and checked
  // by what a read-only tool shows afterwards (which a fresh server without the change must not show).
  const isKnown = (v: string) => [...keyValues.values()].some((xs) => xs.includes(v));
  async function write(forced?: ToolInfo): Promise<Candidate | 'unverifiable' | undefined> {
    const open = opts.isolatedServer;
    if (!open || !writeTools.length) return undefined;
    const tool = forced ?? leastTried(writeTools);
    const args = writeArgs(tool);
    if (!args) return undefined;
    const evidence = writeEvidence(args, isKnown);
    const readers = stateReaders(usableTools(), evidence.readerValues);
    const replayed = await replayOnIsolated(open, [{ tool: tool.name, args }], readers, callTimeoutMs);
    if ('failed' in replayed) {
      note(tool.name, 'calls_failed', replayed.detail);
      return 'unverifiable';
    }
    const state = readers.length ? stateCheckOf(readers, replayed, evidence) : undefined;
    if (!state) {
      // No reader can be asked about what it wrote (a toggle, a file made as a resource, on a server whose readers
      // take none of its values): a write that destroys nothing is asked about its own result instead.
      if (tool.annotations.destructiveHint === false && !readers.some((r) => Object.keys(r.args).length)) return ownResult(open, tool, args, replayed.outputs[0]);
      note(tool.name, readers.length ? 'replay_failed' : 'nothing_to_ask');
      return readers.length ? 'unverifiable' : undefined;
    }
    return {
      task: render('write', { action: actionPhrase(tool), args: plainArgs(args) }),
      difficulty: evidence.strings.length > 2 ? 3 : 2,
      checks: [{ kind: 'tool_called', tool: tool.name, args }, state],
      verified: true,
    };
  }

  /**
   * A task on what a write answers itself, when no reader shows the change: the result it gave on a fresh server is
   * the ground truth only if a second fresh server gives it again (a toggle answers "Started" on a fresh server, and
   * every rollout gets one). Asked in the words of a lookup.
   */
  async function ownResult(open: NonNullable<OfflineOptions['isolatedServer']>, tool: ToolInfo, args: Record<string, unknown>, out: ToolCallOutcome): Promise<Candidate | 'unverifiable' | undefined> {
    const answer = chooseAnswer(out, args, tool, rng);
    if (!answer) {
      note(tool.name, 'nothing_to_ask');
      return undefined;
    }
    const again = await replayOnIsolated(open, [{ tool: tool.name, args }], [], callTimeoutMs);
    if ('failed' in again || !answer.values.every((v) => answerContains(again.outputs[0].text, v))) {
      note(tool.name, 'replay_failed');
      return 'unverifiable';
    }
    return { ...asked(tool, args, answer), verified: true };
  }

  /**
   * Arguments for a write tool, or undefined (noted) when none can be built. `made`: values a write before it in the
   * same task creates, by entity key ("name" → ["Quill"]): a reference to an entity takes one of those.
   */
  function writeArgs(tool: ToolInfo, made?: Map<string, string[]>): Record<string, unknown> | undefined {
    // A reference to something (entityName, book_id) takes a discovered value; what the write creates is new.
    // A destructive tool removes what exists, so every value it takes is a discovered one (observations to delete).
    const destructive = tool.annotations.destructiveHint !== false;
    // An edit replaces text that is there: its path is a file whose content discovery read.
    const edits = hasKey(tool.inputSchema, OLD_TEXT_NAMES);
    const refs = (ctx: CandidateContext) => {
      if (!ctx.name) return undefined;
      const fixed = fixedCandidates(ctx.name, ctx.schema);
      if (fixed) return fixed;
      const ref = made && entityKey(ctx.name) ? made.get(entityKey(ctx.name)!) : undefined;
      if (ref?.length && (isIdName(ctx.name) || words(ctx.name).length >= 2)) return ref;
      if (edits && entityKey(ctx.name) === 'path') return [...contentOf.keys()].filter((p) => !folders.has(p));
      // An amount a person asks for in one change is small, and a large one is likelier refused (stock, limits).
      if ((ctx.schema.type === 'integer' || ctx.schema.type === 'number') && !isIdName(ctx.name)) return smallAmounts(ctx.schema);
      if (REF_NAMES.test(ctx.name)) return (keyValues.get('path') ?? []).filter((p) => typeof p === 'string' && /\/[^/]+\.[a-z0-9]+$/i.test(p));
      if (isIdName(ctx.name) || (words(ctx.name).length >= 2 && entityKey(ctx.name))) return candidates(tool)(ctx);
      const listed = destructive ? listValues.get(ctx.name) : undefined;
      return listed?.length ? listed : destructive ? candidates(tool)(ctx) : undefined;
    };
    let args: Record<string, unknown>;
    try {
      args = withFixed(tool.inputSchema, synthesizeArgs(tool.inputSchema, { rng, optionalRate: 0, candidates: refs }));
    } catch {
      note(tool.name, 'no_discoverable_arguments');
      return undefined;
    }
    if (edits) {
      const file = Object.entries(args).find(([k]) => entityKey(k) === 'path')?.[1];
      const content = typeof file === 'string' ? contentOf.get(file)?.text : undefined;
      if (content === undefined) {
        note(tool.name, 'no_discoverable_arguments');
        return undefined;
      }
      args = withOldText(args, uniqueLines(content), rng);
    } else args = newPathsBeside(args, FOLDER_WORDS.test(words(tool.name).join(' ')));
    return args;
  }

  /** What a write creates that names a thing, by entity key: `entities: [{name: "Quill"}]` → name → ["Quill"]. */
  function madeBy(args: Record<string, unknown>): Map<string, string[]> {
    const made = new Map<string, string[]>();
    walkObjects(args, (o) => {
      for (const [k, v] of Object.entries(o)) {
        const ek = entityKey(k);
        if (ek && typeof v === 'string' && !isKnown(v)) made.set(ek, [...(made.get(ek) ?? []), v]);
      }
    });
    return made;
  }

  // 2f. make → use: a write that creates something new (an entity), then a tool that uses it — a reader that shows
  // it (open_nodes, search_nodes, read_graph) or a write that refers to it (add_observations). On an empty server
  // this is how the readers, and the writes that need something there, get tasks. `forced`: the tool that uses it;
  // `maker`: the write that makes it.
  async function makeThenUse(forced: ToolInfo, maker: ToolInfo): Promise<Candidate | 'unverifiable' | undefined> {
    const open = opts.isolatedServer;
    if (!open) return undefined;
    const makeArgs = writeArgs(maker);
    if (!makeArgs) return undefined;
    const made = madeBy(makeArgs);
    const madeValues = [...made.values()].flat();
    if (!madeValues.length) return undefined;
    const first = render('write', { action: actionPhrase(maker), args: plainArgs(makeArgs) });
    const makeCall = { kind: 'tool_called' as const, tool: maker.name, args: makeArgs };
    if (forced.annotations.readOnlyHint === true) {
      // The reader is asked for what was made: it must show it after the write, and an untouched server must not.
      const readers = stateReaders([forced], madeValues);
      if (!readers.length) return undefined;
      const reader = rng.pick(readers);
      const evidence = writeEvidence(makeArgs, isKnown);
      const replayed = await replayOnIsolated(open, [{ tool: maker.name, args: makeArgs }], [reader], callTimeoutMs);
      if ('failed' in replayed) return 'unverifiable';
      const state = stateCheckOf([reader], replayed, evidence);
      if (!state) {
        note(forced.name, 'replay_failed');
        return 'unverifiable';
      }
      const callText = Object.keys(reader.args).length ? `${actionPhrase(forced)} with ${plainArgs(reader.args)}` : actionPhrase(forced);
      return {
        task: `${first} ${render('thenRead', { call: callText })}`,
        difficulty: 3,
        checks: [makeCall, { kind: 'tool_called', tool: forced.name, args: reader.args }, state],
        verified: true,
      };
    }
    const useArgs = writeArgs(forced, made);
    if (!useArgs || !stringLeaves(useArgs).some((v) => madeValues.includes(v))) return undefined;
    const known = (v: string) => isKnown(v) || madeValues.includes(v);
    const evidence = writeEvidence(useArgs, known);
    const readers = stateReaders(usableTools(), evidence.readerValues);
    if (!readers.length) return undefined;
    const replayed = await replayOnIsolated(open, [{ tool: maker.name, args: makeArgs }, { tool: forced.name, args: useArgs }], readers, callTimeoutMs);
    if ('failed' in replayed) {
      if (replayed.failed === forced.name) note(forced.name, 'calls_failed');
      return 'unverifiable';
    }
    // What only the second write shows (its new values): the first alone would not pass it.
    const state = stateCheckOf(readers, replayed, { ...evidence, values: [] });
    if (!state || state.kind !== 'state_contains') {
      note(forced.name, 'replay_failed');
      return 'unverifiable';
    }
    return {
      task: `${first} ${render('thenWrite', { action: actionPhrase(forced), args: plainArgs(useArgs) })}`,
      difficulty: 3,
      checks: [makeCall, { kind: 'tool_called', tool: forced.name, args: useArgs }, state],
      verified: true,
    };
  }

  /** How many discovered records hold `x` in a field or a list (1: it names its record). */
  const owners = (x: string): number =>
    recs.filter((r) => Object.values(r.fields).includes(x) || Object.values(r.lists ?? {}).some((xs) => xs.includes(x))).length;

  /** A read-only search tool called with `text` as its one required argument, when the server has one. */
  function searchFor(text: string): { tool: string; args: Record<string, unknown> } | undefined {
    for (const t of usableTools()) {
      const req = requiredNames(t);
      const args = { [req[0]]: text };
      if (req.length === 1 && SEARCH_NAMES.test(req[0]) && validates(t.inputSchema, args)) return { tool: t.name, args };
    }
    return undefined;
  }

  interface Clue {
    /** The words that name the value in a task ("the entity whose observations include "born in London""). */
    text: string;
    /** The read-only call a solver makes to go from the clue to the value, and what its result must show. */
    find: { tool: string; args: Record<string, unknown> };
    shows: string;
  }

  /**
   * What names a discovered value without saying it: a list item unique to its record (found again by searching for
   * it), or a line that only its file holds (found by reading the file).
   */
  function cluesFor(v: string): Clue[] {
    const out: Clue[] = [];
    for (const rec of recs) {
      if (!Object.values(rec.fields).includes(v)) continue;
      for (const [k, xs] of Object.entries(rec.lists ?? {})) {
        for (const x of xs) {
          if (x.length < 4 || x.length > 60 || answerContains(x, v) || owners(x) !== 1) continue;
          const find = searchFor(x);
          if (find) out.push({ text: `the ${rec.noun} whose ${label(k)} include "${x}"`, find, shows: v });
        }
      }
    }
    const read = contentOf.get(v);
    if (read && !folders.has(v)) {
      for (const line of uniqueLines(read.text)) {
        const l = line.trim();
        if ([...contentOf].some(([p, o]) => p !== v && o.text.includes(l))) continue;
        // The folder is named (as a person would), so the agent knows where to look.
        const dir = v.includes('/') ? v.slice(0, v.lastIndexOf('/')) : '';
        out.push({ text: `the file ${dir ? `in "${dir}" ` : ''}that contains the line "${l}"`, find: { tool: read.tool, args: read.args }, shows: l });
      }
    }
    return out;
  }

  // 2e. find → act: a lookup or a write whose entity the task names by a clue, so the agent must find it first
  // (search for the clue, or read the files), then inspect or change it. The found value feeds the checked call.
  async function found(): Promise<Candidate | 'unverifiable' | undefined> {
    const base = writeTools.length && opts.isolatedServer && rng.chance(0.5) ? await write() : await lookup();
    if (!base || base === 'unverifiable') return base;
    const first = base.checks.find((k) => k.kind === 'tool_called');
    if (first?.kind !== 'tool_called') return undefined;
    const named = [...new Set(stringLeaves(first.args))].filter((v) => isKnown(v) && base.task.includes(`"${v}"`));
    const options = named.flatMap((v) => cluesFor(v).map((c) => ({ v, ...c })));
    if (!options.length) return undefined;
    const pick = rng.pick(options);
    const task = base.task.split(`["${pick.v}"]`).join(`of ${pick.text}`).split(`"${pick.v}"`).join(`of ${pick.text}`);
    // Named another way too (a path's base name): no finding needed. Inside a JSON list the clue reads badly.
    if (answerContains(task.split(pick.text).join(''), pick.v) || /[[,]of the /.test(task)) return undefined;
    // The solver's find step, replayed: the clue leads to the value.
    const out = await call(pick.find.tool, pick.find.args, true);
    if (out.isError || !answerContains(out.text, pick.shows)) return 'unverifiable';
    return { ...base, task, difficulty: Math.min(5, base.difficulty + 2) };
  }

  /**
   * A path argument that names something new (a move's destination, a file to write) gets a name beside a discovered
   * path, in the same folder, so that it lies where the server may write.
   */
  function newPathsBeside(args: Record<string, unknown>, folder: boolean): Record<string, unknown> {
    const known = (keyValues.get('path') ?? []).filter((p): p is string => typeof p === 'string' && p.includes('/'));
    if (!known.length) return args;
    const out = { ...args };
    for (const [k, v] of Object.entries(args)) {
      // A destination, or a path no listing showed (a folder to create): a new name in a discovered folder.
      if (typeof v !== 'string' || !(NEW_PATH_NAMES.test(k) || entityKey(k) === 'path') || isKnown(v)) continue;
      const base = known.find((p) => Object.values(args).includes(p)) ?? known[0];
      const name = v.trim().toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '') || 'new';
      // A new folder gets no extension; a new file the extension of the file beside it.
      out[k] = `${base.slice(0, base.lastIndexOf('/'))}/${name}${!folder && /\.[a-z0-9]+$/i.test(base) ? base.slice(base.lastIndexOf('.')) : ''}`;
    }
    return out;
  }

  // 3. Replay: every checked call again, fresh, and every expected value in the real output again.
  async function replay(c: Candidate): Promise<string | false> {
    if (c.verified) return '';
    let outputs = '';
    for (const check of c.checks) {
      if (check.kind !== 'tool_called') continue;
      const tool = byName.get(check.tool);
      if (!tool || !validates(tool.inputSchema, check.args)) return false;
      const out = await call(check.tool, check.args, true);
      if (out.isError) return false;
      outputs += out.text + '\n';
    }
    return c.checks.every((check) => check.kind !== 'answer_contains' || answerContains(outputs, check.value)) && outputs;
  }

  /**
   * The values a value's question has for other entities: the same field of the other discovered records, leaving out
   * numbers (too easily said in passing), values that hold the value or that it holds, what the replay's `outputs`
   * show (an agent that did the work may quote them), and excluded entities (another set's).
   */
  function othersOf(value: string, outputs: string): string[] {
    const keys = new Set(recs.flatMap((r) => Object.entries(r.fields).filter(([, v]) => String(v) === value).map(([k]) => k)));
    const out = new Set<string>();
    for (const r of recs) {
      for (const k of keys) {
        const o = r.fields[k];
        if (typeof o !== 'string' || o.trim().length < 2 || numberValue(normalizeAnswerText(o)) !== undefined) continue;
        if (answerContains(o, value) || answerContains(value, o) || answerContains(outputs, o) || excludedEntities.has(o.trim().toLowerCase())) continue;
        out.add(o);
      }
    }
    return [...out].slice(0, MAX_OTHERS);
  }

  /** The checks a kept candidate is written with: a value-answer task's as answer_value, with the others of each value. */
  function finalChecks(c: Candidate, outputs: string): Check[] {
    return valueAnswerChecks(c.checks, (t) => byName.get(t)?.annotations.readOnlyHint === true).map((k) => {
      if (k.kind !== 'answer_value') return k;
      const others = othersOf(k.value, outputs);
      return others.length ? { ...k, others } : k;
    });
  }

  const excludedEntities = new Set([...(opts.exclude?.entities ?? [])].map((e) => e.trim().toLowerCase()));
  const dupFilter = new DuplicateFilter(opts.duplicateThreshold ?? DEFAULT_DUPLICATE_THRESHOLD, opts.exclude?.tasks ?? []);
  const seenChecks = new Set<string>();
  const scenarios: Scenario[] = [];
  let droppedDuplicates = 0;
  let droppedUnverifiable = 0;
  let droppedExcluded = 0;
  let attempts = 0;
  const shapes: [number, () => Promise<Candidate | 'unverifiable' | undefined>][] = writeTools.length
    ? [[0.25, lookup], [0.2, chain], [0.1, flow], [0.25, write], [0.2, found]]
    : [[0.35, lookup], [0.3, chain], [0.15, flow], [0.2, found]];

  /** Keeps a candidate if it passes every filter and its replay; says whether it was kept. */
  async function consider(c: Candidate | 'unverifiable' | undefined): Promise<boolean> {
    if (c === undefined) return false;
    if (c === 'unverifiable') {
      droppedUnverifiable++;
      return false;
    }
    const firstCall = c.checks.find((k) => k.kind === 'tool_called');
    const entityKey = canonical(firstCall?.kind === 'tool_called' ? firstCall.args : {});
    if (partition && hashString(entityKey) % partition.of !== partition.index) {
      droppedExcluded++;
      return false;
    }
    if (excludedEntities.size && [...scalarArgValues(c.checks.map((k) => (k.kind === 'tool_called' ? k.args : k.value)))].some((v) => excludedEntities.has(v))) {
      droppedExcluded++;
      return false;
    }
    // A value the task already states is no test of the agent.
    const taskNorm = c.task.toLowerCase();
    if (c.checks.some((k) => k.kind === 'answer_contains' && answerContains(taskNorm, k.value))) return false;
    const checksKey = canonical(c.checks.map((k) => (k.kind === 'tool_called' ? { tool: k.tool, args: k.args } : k.value)));
    const calledTools = c.checks.flatMap((k) => (k.kind === 'tool_called' ? [k.tool] : []));
    if (seenChecks.has(checksKey) || dupFilter.isDuplicate(c.task)) {
      droppedDuplicates++;
      for (const t of calledTools) note(t, 'only_duplicates');
      return false;
    }
    const outputs = await replay(c);
    if (outputs === false) {
      droppedUnverifiable++;
      for (const t of calledTools) note(t, 'replay_failed');
      return false;
    }
    seenChecks.add(checksKey);
    dupFilter.add(c.task);
    scenarios.push({ id: `schema-${hashString(c.task + checksKey).toString(16).padStart(8, '0')}`, task: c.task, difficulty: c.difficulty, source: 'schema', checks: finalChecks(c, outputs) });
    return true;
  }

  // First round: every allowed tool gets a few candidates of its own (until one is kept), so that which tools are
  // covered does not hang on the seed's draws; then shapes are drawn at random.
  for (const tool of [...tools, ...writeTools]) {
    for (let i = 0; i < FIRST_ROUND_TRIES && scenarios.length < count && attempts < maxAttempts && !disabled.has(tool.name); i++) {
      attempts++;
      if (await consider(tool.annotations.readOnlyHint === true ? await lookup(tool) : await write(tool))) break;
    }
  }
  // Tools the first round left without a scenario (readers of an empty graph, writes that need something there):
  // a task that makes something first, then uses it.
  // Each write that makes something new (not destructive) is tried as the maker in turn.
  const covered = () => scenariosPerTool(scenarios);
  const makers = writeTools.filter((t) => t.annotations.destructiveHint === false);
  for (const tool of [...tools, ...writeTools]) {
    for (let i = 0; i < FIRST_ROUND_TRIES * makers.length && scenarios.length < count && attempts < maxAttempts && !disabled.has(tool.name) && !covered().has(tool.name); i++) {
      const maker = makers[i % makers.length];
      if (maker.name === tool.name) continue;
      attempts++;
      await consider(await makeThenUse(tool, maker));
    }
  }

  while (scenarios.length < count && attempts < maxAttempts && usableTools().length) {
    attempts++;
    let r = rng.next();
    let shape = shapes[0][1];
    for (const [w, fn] of shapes) {
      if (r < w) {
        shape = fn;
        break;
      }
      r -= w;
    }
    await consider(await shape());
  }

  return {
    scenarios,
    droppedDuplicates,
    droppedUnverifiable,
    droppedExcluded,
    attempts,
    readOnlyTools: tools.map((t) => t.name),
    coverage: coverageOf(allTools, scenarios, excluded, furthest, lastError),
    entities,
  };
}

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

/** What a scripted solver's replay of writes showed: each call's result, and each reader's before and after. */
export interface IsolatedReplay {
  outputs: ToolCallOutcome[];
  /** The untouched state, read twice (what differs between two reads of it is no evidence of a change). */
  before: ToolCallOutcome[];
  again: ToolCallOutcome[];
  after: ToolCallOutcome[];
}

/**
 * The scripted solver for a task that writes: `calls` in order on a fresh isolated server of their own, then what
 * the readers show; the readers also on another fresh server, untouched. Both servers are closed at once. A call
 * that fails (or succeeds with an error in disguise) ends the replay: `{failed: tool}`.
 */
export async function replayOnIsolated(
  open: NonNullable<OfflineOptions['isolatedServer']>,
  calls: readonly { tool: string; args: Record<string, unknown> }[],
  readers: readonly StateReader[],
  timeoutMs: number,
): Promise<IsolatedReplay | { failed: string; detail: string }> {
  const before: ToolCallOutcome[] = [];
  const again: ToolCallOutcome[] = [];
  const untouched = withPlaceholder(await open());
  try {
    for (const r of readers) before.push(await untouched.callTool(r.tool, r.args, { timeoutMs }));
    for (const r of readers) again.push(await untouched.callTool(r.tool, r.args, { timeoutMs }));
  } finally {
    await untouched.close();
  }
  const outputs: ToolCallOutcome[] = [];
  const after: ToolCallOutcome[] = [];
  const box = withPlaceholder(await open());
  try {
    for (const c of calls) {
      const out = await box.callTool(c.tool, c.args, { timeoutMs });
      const disguised = out.isError ? undefined : disguisedError(out);
      if (out.isError || disguised) return { failed: c.tool, detail: disguised ?? out.text.slice(0, 200) };
      outputs.push(out);
    }
    for (const r of readers) after.push(await box.callTool(r.tool, r.args, { timeoutMs }));
  } finally {
    await box.close();
  }
  return { outputs, before, again, after };
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
  for (const v of strings) if (v.length >= 3 && !given.has(v.toLowerCase())) options.push({ kind: 'state_absent', ...reader, value: v });
  for (const { path, value } of numericLeaves(parseJson(after))) {
    if (UNSTABLE_KEYS.test(path[path.length - 1] ?? '') || numberAt(before, path) === undefined) continue;
    options.push({ kind: 'state_number', ...reader, path, value });
  }
  return options.find((c) => stateShows(c, { text: after, is_error: false }) && !stateShows(c, { text: before, is_error: false }));
}

/**
 * Globs that match discovered files: each file's extension (`*.md`, `**\/*.md`) and its base name. A synthesized
 * pattern matches nothing; these match what is there.
 */
function globsOf(paths: readonly Scalar[]): string[] {
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
function hasKey(schema: JsonSchema, re: RegExp, depth = 0): boolean {
  if (depth > 6 || !isPlainObject(schema)) return false;
  const props = isPlainObject(schema.properties) ? (schema.properties as Record<string, JsonSchema>) : {};
  if (Object.keys(props).some((k) => re.test(k))) return true;
  return [...Object.values(props), schema.items as JsonSchema].some((x) => x !== undefined && hasKey(x, re, depth + 1));
}

/** The smallest amounts a numeric schema allows (1, 2, 3 when it sets no minimum). */
function smallAmounts(schema: JsonSchema): number[] {
  const min = typeof schema.minimum === 'number' ? schema.minimum : typeof schema.exclusiveMinimum === 'number' ? schema.exclusiveMinimum + 1 : 1;
  const lo = Math.ceil(Math.max(min, 1));
  return [lo, lo + 1, lo + 2];
}

/** The lines of a text that occur in it once, with letters and of a length a task can quote. */
function uniqueLines(text: string): string[] {
  const lines = text.split('\n').map((l) => l.replace(/\s+$/, ''));
  return lines.filter((l, i) => l.trim().length >= 4 && l.length <= 80 && /[A-Za-z]/.test(l) && lines.indexOf(l) === i && lines.lastIndexOf(l) === i && text.split(l).length === 2);
}

/**
 * Text to replace, taken from what is there: every list of edits keeps as many items as it must (one, or its
 * minItems), and each item's old-text field (`oldText`) becomes a distinct line of the file.
 */
function withOldText(args: Record<string, unknown>, lines: string[], rng: Rng): Record<string, unknown> {
  const pool = rng.shuffle(lines);
  const fill = (v: unknown): unknown => {
    if (Array.isArray(v) && v.some((x) => isPlainObject(x) && Object.keys(x).some((k) => OLD_TEXT_NAMES.test(k)))) return v.slice(0, 1).map(fill);
    if (!isPlainObject(v)) return v;
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, OLD_TEXT_NAMES.test(k) && typeof x === 'string' ? (pool.shift() ?? x) : fill(x)]));
  };
  return fill(args) as Record<string, unknown>;
}

/** Every string in a value, however deep. */
function stringLeaves(v: unknown, out: string[] = []): string[] {
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) for (const x of v) stringLeaves(x, out);
  else if (isPlainObject(v)) for (const x of Object.values(v)) stringLeaves(x, out);
  return out;
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

/** Numbers anywhere in a JSON value, with their paths; an array's item count is its `length`. */
function numericLeaves(v: unknown, path: string[] = [], out: { path: string[]; value: number }[] = []): { path: string[]; value: number }[] {
  if (path.length > 6) return out;
  if (typeof v === 'number' && Number.isFinite(v) && path.length) out.push({ path, value: v });
  else if (Array.isArray(v)) {
    out.push({ path: [...path, 'length'], value: v.length });
    v.forEach((x, i) => numericLeaves(x, [...path, String(i)], out));
  } else if (isPlainObject(v)) for (const [k, x] of Object.entries(v)) numericLeaves(x, [...path, k], out);
  return out;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * A server whose `{sandbox}` directory is spoken of as `{sandbox}`: the placeholder in arguments becomes the
 * directory, and the directory in results becomes the placeholder. So what generation harvests, asks and checks
 * holds no absolute sandbox path, and a scenario made on one sandbox reads the same on the next.
 */
export function withPlaceholder<T extends ScenarioServer>(server: T): T {
  const dir = server.sandboxDir;
  if (dir === undefined) return server;
  const dirs = [...new Set([dir, safeRealpath(dir)])].sort((a, b) => b.length - a.length);
  const toPlaceholder = <V>(v: V): V => {
    if (typeof v === 'string') return dirs.reduce((s, d) => s.split(d).join(SANDBOX_PLACEHOLDER), v as string) as V;
    if (Array.isArray(v)) return v.map(toPlaceholder) as V;
    if (isPlainObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toPlaceholder(x)])) as V;
    return v;
  };
  const callTool: ScenarioServer['callTool'] = async (name, args, o) => {
    const out = await server.callTool(name, replaceSandbox(args, dir), o);
    return { ...out, text: toPlaceholder(out.text), ...(out.structuredContent !== undefined ? { structuredContent: toPlaceholder(out.structuredContent) } : {}) };
  };
  // A proxy rather than a copy: the session's own methods keep running on the session itself.
  return new Proxy(server, {
    get(target, prop) {
      if (prop === 'callTool') return callTool;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

function safeRealpath(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    return dir;
  }
}

/** Words of a tool's name that say it is about folders (create_directory, list_directory). */
const FOLDER_WORDS = /\b(director(y|ies)|folders?|dirs?)\b/;

/** Files a tool that reads media is given first (and a tool that reads text is not, when there are others). */
const MEDIA_FILE = /\.(png|jpe?g|gif|webp|bmp|ico|tiff?|mp3|wav|ogg|oga|flac|m4a|aac|mp4|webm)$/i;

/** Argument draws for one lookup: arguments that failed are drawn again, up to this many times. */
const ARG_DRAWS = 4;

/** Candidates each allowed tool gets in the first round, before shapes are drawn at random: until one is kept. */
const FIRST_ROUND_TRIES = 3;

/** Arguments that make a call take time (a duration, a number of steps): given the least the schema allows. */
const DURATION_NAMES = /^(duration|delay|sleep|wait|interval|steps|iterations|rounds|seconds|secs)(_?(ms|s|secs?|seconds))?$|^(duration|delay|sleep|wait)_?\w*$/i;

/** A small text as a data: URI, for an argument that takes the URL or data URI of content to fetch. */
const DATA_URI = 'data:text/plain;base64,' + Buffer.from('hello world\n').toString('base64');

/** The least a numeric schema allows (1 when it sets no minimum). */
function leastAmount(schema: JsonSchema): number {
  if (typeof schema.minimum === 'number') return schema.minimum;
  if (typeof schema.exclusiveMinimum === 'number') return schema.type === 'integer' ? Math.floor(schema.exclusiveMinimum) + 1 : schema.exclusiveMinimum + 1;
  return 1;
}

/**
 * Values an argument gets whatever was discovered: the least duration or number of steps (a long-running
 * operation then ends within the call timeout), and a data: URI for content to fetch (no network is needed).
 */
function fixedCandidates(name: string, schema: JsonSchema): unknown[] | undefined {
  if ((schema.type === 'number' || schema.type === 'integer') && DURATION_NAMES.test(name)) return [leastAmount(schema)];
  if (schema.type === 'string' && (schema.format === 'uri' || schema.format === 'url') && /\bdata uri\b/i.test(String(schema.description ?? ''))) return [DATA_URI];
  return undefined;
}

/**
 * `args` with every top-level argument that has a fixed value (see fixedCandidates) set to it, optional ones too:
 * left out, the server's default applies (a 10-second operation, a URL on the network).
 */
function withFixed(schema: JsonSchema, args: Record<string, unknown>): Record<string, unknown> {
  const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const out = { ...args };
  for (const [k, s] of Object.entries(props)) {
    const fixed = fixedCandidates(k, s);
    if (fixed && !(k in out)) out[k] = fixed[0];
  }
  return validates(schema, out) ? out : args;
}

/** What a tool's path argument names: a folder (list_directory, directory_tree, search_files), a file, or either. */
function pathKind(tool: ToolInfo): 'folder' | 'file' | undefined {
  const name = words(tool.name).join(' ');
  if (FOLDER_WORDS.test(name) || /\btree\b/.test(name)) return 'folder';
  if (/\bsearch\b/.test(name) && hasKey(tool.inputSchema, GLOB_NAMES)) return 'folder';
  if (/\b(read|file|files|media|text)\b/.test(name)) return 'file';
  return undefined;
}

/** At most this many other entities' values are kept per answer_value check (enough to catch a pasted listing). */
const MAX_OTHERS = 40;
/** Discovery rounds after the first (each feeds what the last one found back in), and calls per tool in each. */
const DISCOVERY_ROUNDS = 3;
const DISCOVERY_CALLS_PER_TOOL = 3;

/** Calls `fn` on every plain object in `data`, however deep (bounded). */
function walkObjects(data: unknown, fn: (o: Record<string, unknown>) => void, depth = 0): void {
  if (depth > 6) return;
  if (Array.isArray(data)) for (const x of data) walkObjects(x, fn, depth + 1);
  else if (isPlainObject(data)) {
    fn(data);
    for (const v of Object.values(data)) walkObjects(v, fn, depth + 1);
  }
}

/** The stages a candidate passes, in order: a tool with no scenario is reported with the furthest it reached. */
const STAGES: NoScenarioReason[] = ['no_discoverable_arguments', 'calls_failed', 'nothing_to_ask', 'only_duplicates', 'replay_failed'];

function coverageOf(
  tools: ToolInfo[],
  scenarios: Scenario[],
  excluded: Map<string, { reason: NoScenarioReason; detail?: string }>,
  furthest: Map<string, number>,
  lastError: ReadonlyMap<string, string>,
): ToolCoverage[] {
  const made = scenariosPerTool(scenarios);
  const stateChecked = scenariosPerTool(scenarios.filter((s) => s.checks?.some(isStateCheck)));
  return tools.map((t) => {
    const n = made.get(t.name) ?? 0;
    if (n > 0) return { tool: t.name, scenarios: n, stateChecked: stateChecked.get(t.name) ?? 0 };
    const stage = furthest.get(t.name);
    const reason = stage === undefined ? 'not_tried' : STAGES[stage];
    const detail = reason === 'calls_failed' ? lastError.get(t.name) : undefined;
    return { tool: t.name, scenarios: 0, stateChecked: 0, ...(excluded.get(t.name) ?? { reason, ...(detail ? { detail } : {}) }) };
  });
}

/**
 * A scenario's entities: the values in its checked call arguments and expected answers, lower-cased. Pass
 * them as `exclude.entities` to build a set that shares no entity with this one.
 */
export function scenarioEntities(s: Scenario): string[] {
  return [...scalarArgValues((s.checks ?? []).map((k) => (k.kind === 'tool_called' ? k.args : k.kind === 'answer_value' ? [k.value, ...(k.via ?? []).map((v) => v.args)] : k.value)))];
}

function push(m: Map<string, Scalar[]>, k: string, v: Scalar): void {
  const xs = m.get(k);
  if (!xs) m.set(k, [v]);
  else if (!xs.includes(v) && xs.length < 500) xs.push(v);
}

function dedupeRecords(recs: EntityRecord[]): void {
  // The same entity seen by several tools keeps one merged record per (noun, id or label).
  const byKey = new Map<string, EntityRecord>();
  const out: EntityRecord[] = [];
  for (const r of recs) {
    const id = r.fields.id ?? recordLabel(r)?.value;
    if (id === undefined) {
      out.push(r);
      continue;
    }
    const key = `${r.noun}\u0000${String(id)}`;
    const prev = byKey.get(key);
    if (prev) {
      Object.assign(prev.fields, r.fields);
      if (r.lists) prev.lists = { ...prev.lists, ...r.lists };
    }
    else {
      byKey.set(key, r);
      out.push(r);
    }
  }
  recs.splice(0, recs.length, ...out);
}

function requiredNames(tool: ToolInfo): string[] {
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
function discoveryArgs(tool: ToolInfo): Record<string, unknown>[] {
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
