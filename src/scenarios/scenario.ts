/**
 * The scenario contract: what AutoRL produces and what the agent, the judge and training consume.
 *
 * A scenario file is JSON Lines, one scenario per line:
 *   {"id":"s-0001","task":"…","difficulty":2,"source":"schema","checks":[{"kind":"tool_called","tool":"get_book","args":{"book_id":"bk-001"}}]}
 * A scenario set is a folder holding `train.jsonl`, `val.jsonl` and, optionally, `test.jsonl`: training
 * trains on train, validation selects the checkpoint and decides when to stop, and test is only reported.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { writeFileAtomic } from '../util/atomic.js';
import { McprlError } from '../util/errors.js';
import type { OnProgress } from '../util/progress.js';
import { SANDBOX_PLACEHOLDER } from '../mcp/sandbox.js';
import { holdsNumber, holdsText, impliedTolerance, numberValue } from './numbers.js';

/** A verifiable condition on a finished trajectory. */
export const CheckSchema = z.discriminatedUnion('kind', [
  /** The agent called `tool` with arguments that contain `args` (a recursive subset match, see argsMatch). */
  z.object({ kind: z.literal('tool_called'), tool: z.string(), args: z.record(z.string(), z.unknown()) }),
  /**
   * The final answer contains `value` (normalised, case-insensitive, see answerContains; a value that is a number
   * matches as a number, never as a substring).
   */
  z.object({ kind: z.literal('answer_contains'), value: z.string() }),
  /**
   * A value the agent found out: the final answer holds `value` and the result of some call the server executed
   * holds it too (both as answerContains reads them), whichever tool gave it — several tools may answer the same
   * question. `tolerance`: the absolute tolerance of a number value (default: exact for an integer as written, 1e-6
   * relative for one written with a decimal part). `via`: the calls generation read the value from; a record of where
   * it came from (replay, entities, coverage), never required of the agent. `others`: the values the same question
   * has for other entities (the same field of other records); an answer holding one of them did not single the value
   * out (a whole listing pasted back is no answer), so it fails.
   */
  z.object({
    kind: z.literal('answer_value'),
    value: z.string(),
    tolerance: z.number().nonnegative().optional(),
    via: z.array(z.object({ tool: z.string(), args: z.record(z.string(), z.unknown()) })).optional(),
    others: z.array(z.string()).optional(),
  }),
  /**
   * A state check: after the rollout, calling the read-only `tool` with `args` on the rollout's own server returns
   * text that contains `value` (so the write the task asked for really happened).
   */
  z.object({ kind: z.literal('state_contains'), tool: z.string(), args: z.record(z.string(), z.unknown()), value: z.string() }),
  /**
   * A state check that something is gone: after the rollout, the read-only `tool` with `args` answers without an
   * error, and its text no longer contains `value` (which the untouched server shows).
   */
  z.object({ kind: z.literal('state_absent'), tool: z.string(), args: z.record(z.string(), z.unknown()), value: z.string() }),
  /**
   * A state check on a number: after the rollout, the read-only `tool` with `args` returns JSON whose number at
   * `path` (object keys and array indices; `length` of an array counts its items) equals `value` — e.g. a stock level
   * raised by the restocked amount, or one more order in a listing. The untouched server shows another number.
   */
  z.object({ kind: z.literal('state_number'), tool: z.string(), args: z.record(z.string(), z.unknown()), path: z.array(z.string()).min(1), value: z.number() }),
]);

export const ScenarioSchema = z.object({
  id: z.string(),
  task: z.string().min(1),
  difficulty: z.number().int().min(1).max(5),
  source: z.enum(['llm', 'schema']),
  checks: z.array(CheckSchema).optional(),
});

export type Check = z.infer<typeof CheckSchema>;
/** The checks that read the server's state after the rollout. */
export type StateCheck = Extract<Check, { kind: 'state_contains' | 'state_absent' | 'state_number' }>;

export function isStateCheck(c: Check): c is StateCheck {
  return c.kind === 'state_contains' || c.kind === 'state_absent' || c.kind === 'state_number';
}

/** What a state check read from the server: the result's text and whether it was an error. */
export interface StateRead {
  text: string;
  is_error: boolean;
}

/** The number at `path` in a JSON text (numeric strings count), or undefined. */
export function numberAt(text: string, path: readonly string[]): number | undefined {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  for (const key of path) {
    if (Array.isArray(v)) v = key === 'length' ? v.length : /^\d+$/.test(key) ? v[Number(key)] : undefined;
    else if (v !== null && typeof v === 'object' && Object.prototype.hasOwnProperty.call(v, key)) v = (v as Record<string, unknown>)[key];
    else return undefined;
  }
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v.trim()))) return Number(v.trim());
  return undefined;
}

/** Whether what a state check read shows the expected state (the one rule, used by generation and scoring alike). */
export function stateShows(check: StateCheck, read: StateRead): boolean {
  if (read.is_error) return false;
  if (check.kind === 'state_contains') return answerContains(read.text, check.value);
  if (check.kind === 'state_absent') return normalizeAnswerText(check.value) !== '' && !answerContains(read.text, check.value);
  return numberAt(read.text, check.path) === check.value;
}

/**
 * A scenario for one rollout's server: every `{sandbox}` in its task and checks becomes that server's sandbox
 * directory (scenarios made on a sandboxed server store the placeholder, as each rollout gets a directory of its
 * own). Unchanged when `dir` is undefined.
 */
export function scenarioInSandbox(s: Scenario, dir: string | undefined): Scenario {
  if (dir === undefined || !JSON.stringify(s).includes(SANDBOX_PLACEHOLDER)) return s;
  return { ...s, task: replaceSandbox(s.task, dir), ...(s.checks ? { checks: s.checks.map((c) => replaceSandbox(c, dir)) } : {}) };
}

/** `v` with `{sandbox}` replaced by `dir` in every string, however deep. */
export function replaceSandbox<T>(v: T, dir: string): T {
  if (typeof v === 'string') return v.split(SANDBOX_PLACEHOLDER).join(dir) as T;
  if (Array.isArray(v)) return v.map((x) => replaceSandbox(x, dir)) as T;
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, replaceSandbox(x, dir)])) as T;
  return v;
}
export type Scenario = z.infer<typeof ScenarioSchema>;

/** Parses a JSONL scenario file. Blank lines are skipped; any bad line fails the whole read. */
export async function readScenarios(file: string): Promise<Scenario[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new McprlError('SCENARIO_FILE', `${file}: cannot read scenario file (${(err as Error).message})`);
  }
  return parseScenarios(text, file);
}

/** Where a scenario read from a file was written (file:line), for errors about it found later. */
const origins = new WeakMap<Scenario, string>();

/** `file:line` of a scenario read by parseScenarios, else its id. */
export function scenarioOrigin(s: Scenario): string {
  return origins.get(s) ?? `scenario ${JSON.stringify(s.id)}`;
}

/**
 * Refuses a second scenario with an id already taken (ids name groups, trajectories and resumed work). Within a
 * file on every read; across a set's files where they are run together (training refuses overlapping sets anyway).
 */
export function checkUniqueIds(scenarios: Scenario[]): void {
  const first = new Map<string, Scenario>();
  for (const sc of scenarios) {
    const prev = first.get(sc.id);
    if (prev) throw new McprlError('SCENARIO_DUPLICATE_ID', `${scenarioOrigin(sc)}: duplicate scenario id ${JSON.stringify(sc.id)} (first at ${scenarioOrigin(prev)})`);
    first.set(sc.id, sc);
  }
}

/**
 * Refuses scenarios whose tool_called checks name a tool the server does not have: such a check can never pass,
 * so every attempt would score as a failure of the model. `tools`: the server's tool names (and the loop's own).
 */
export function checkScenarioTools(scenarios: Scenario[], tools: readonly string[]): void {
  const known = new Set(tools);
  for (const sc of scenarios) {
    for (const c of sc.checks ?? []) {
      if (c.kind === 'tool_called' && !known.has(c.tool)) {
        throw new McprlError('SCENARIO_UNKNOWN_TOOL', `${scenarioOrigin(sc)}: scenario ${JSON.stringify(sc.id)} checks tool ${JSON.stringify(c.tool)}, which the server does not have (its tools: ${[...known].join(', ')})`);
      }
    }
  }
}

/** Parses JSONL text; `file` only labels error messages. Duplicate ids are refused. */
export function parseScenarios(text: string, file = '<scenarios>'): Scenario[] {
  return parseScenarioLines(text.split(/\r?\n/), file);
}

/** How often, in lines or scenarios, reading and writing a set report progress. */
const PROGRESS_EVERY = 4096;

/** parseScenarios on a file's lines; `onLine(n)` is told now and then how many lines are done (and at the end). */
function parseScenarioLines(lines: string[], file: string, onLine?: (done: number) => void): Scenario[] {
  const out: Scenario[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (onLine && i > 0 && i % PROGRESS_EVERY === 0) onLine(i);
    const line = lines[i].trim();
    if (line === '') continue;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (err) {
      throw new McprlError('SCENARIO_FILE', `${file}:${i + 1}: invalid JSON (${(err as Error).message})`);
    }
    const parsed = ScenarioSchema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const field = issue.path.length > 0 ? issue.path.join('.') : '(scenario)';
      throw new McprlError('SCENARIO_FILE', `${file}:${i + 1}: field ${field}: ${issue.message}`);
    }
    origins.set(parsed.data, `${file}:${i + 1}`);
    out.push(parsed.data);
  }
  onLine?.(lines.length);
  checkUniqueIds(out);
  return out;
}

/** Serialises scenarios as JSONL (one object per line, trailing newline); `onScenario(n)` as parseScenarioLines. */
export function formatScenarios(scenarios: Scenario[], onScenario?: (done: number) => void): string {
  const lines = scenarios.map((s, i) => {
    if (onScenario && i > 0 && i % PROGRESS_EVERY === 0) onScenario(i);
    return JSON.stringify(ScenarioSchema.parse(s));
  });
  onScenario?.(scenarios.length);
  return lines.join('\n') + (scenarios.length ? '\n' : '');
}

/** A scenario set: what training trains on, what selects its checkpoint, and what is only reported. */
export interface ScenarioSet {
  train: Scenario[];
  val: Scenario[];
  /** Held out from every decision (empty when the set has none). */
  test: Scenario[];
}

/**
 * Writes `dir/train.jsonl`, `dir/val.jsonl` and, when `test` has scenarios, `dir/test.jsonl` (each atomically),
 * creating `dir` if needed. `onProgress` counts the scenarios written, over the files.
 */
export async function writeScenarioSet(dir: string, train: Scenario[], val: Scenario[], test: Scenario[] = [], onProgress?: OnProgress): Promise<void> {
  await mkdir(dir, { recursive: true });
  const total = train.length + val.length + test.length;
  let before = 0;
  const files: [string, Scenario[]][] = [['train.jsonl', train], ['val.jsonl', val], ...(test.length > 0 ? [['test.jsonl', test] as [string, Scenario[]]] : [])];
  onProgress?.(0, total);
  for (const [name, scenarios] of files) {
    await writeFileAtomic(path.join(dir, name), formatScenarios(scenarios, onProgress && ((done) => onProgress(before + done, total))));
    before += scenarios.length;
  }
}

/**
 * Reads a scenario set written by writeScenarioSet; `test` is empty when the folder has no test.jsonl. `onProgress`
 * counts the lines read, over the files (a million-line set takes seconds).
 */
export async function loadScenarioSet(dir: string, onProgress?: OnProgress): Promise<ScenarioSet> {
  const files = ['train.jsonl', 'val.jsonl', 'test.jsonl'].map((f) => path.join(dir, f));
  const texts = await Promise.all(files.map(async (file, i) => {
    if (i === 2 && !existsSync(file)) return '';
    try {
      return await readFile(file, 'utf8');
    } catch (err) {
      throw new McprlError('SCENARIO_FILE', `${file}: cannot read scenario file (${(err as Error).message})`);
    }
  }));
  // The newline that ends a file starts no line.
  const lines = texts.map((t) => (t === '' ? [] : t.replace(/\r?\n$/, '').split(/\r?\n/)));
  const total = lines.reduce((n, l) => n + l.length, 0);
  let before = 0;
  onProgress?.(0, total);
  const [train, val, test] = lines.map((l, i) => {
    const parsed = parseScenarioLines(l, files[i], onProgress && ((done) => onProgress(before + done, total)));
    before += l.length;
    return parsed;
  });
  return { train, val, test };
}

/**
 * The subset match used by tool_called checks. Every key of `expected` must be present in `actual` with a
 * matching value: objects match recursively as subsets, arrays match element-wise with equal length, and
 * scalars match exactly, except that strings compare case-insensitively after trimming and a number matches
 * its decimal string form (models often quote numbers).
 */
export function argsMatch(expected: Record<string, unknown>, actual: Record<string, unknown>): boolean {
  if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) return false;
  for (const [key, want] of Object.entries(expected)) {
    if (!Object.prototype.hasOwnProperty.call(actual, key)) return false;
    if (!valueMatches(want, actual[key])) return false;
  }
  return true;
}

function valueMatches(want: unknown, got: unknown): boolean {
  if (want === null || want === undefined) return got === want;
  if (Array.isArray(want)) {
    return Array.isArray(got) && got.length === want.length && want.every((w, i) => valueMatches(w, got[i]));
  }
  if (typeof want === 'object') {
    return got !== null && typeof got === 'object' && !Array.isArray(got) &&
      argsMatch(want as Record<string, unknown>, got as Record<string, unknown>);
  }
  if (typeof want === 'string') {
    if (typeof got === 'string') return got.trim().toLowerCase() === want.trim().toLowerCase();
    if (typeof got === 'number') return String(got) === want.trim();
    return false;
  }
  if (typeof want === 'number') {
    if (typeof got === 'number') return got === want;
    if (typeof got === 'string') return got.trim() !== '' && Number(got.trim()) === want;
    return false;
  }
  return got === want;
}

/**
 * Normalises text for answer matching: Unicode NFKC, lower case, thousands separators removed from numbers
 * ("1,234.5" → "1234.5"), runs of whitespace collapsed to one space.
 */
export function normalizeAnswerText(text: string): string {
  return text
    .normalize('NFKC')
    .toLowerCase()
    .replace(/(\d),(?=\d{3}\b)/g, '$1')
    .replace(/\s+/g, ' ')
    .trim();
}

/**
 * True when the answer contains the value after both are normalised (see normalizeAnswerText). A value that is one
 * number is looked for as a number among the answer's numbers, within `tolerance` (default: exact for an integer as
 * written, 1e-6 relative otherwise): 33 is in "33.0 °C", not in "2033". Any other value is looked for as text whose
 * digits do not run on into a longer number.
 */
export function answerContains(answer: string, value: string, tolerance?: number): boolean {
  const v = normalizeAnswerText(value);
  if (v === '') return true;
  const n = numberValue(v);
  if (n !== undefined) return holdsNumber(normalizeAnswerText(answer), n, impliedTolerance(v, n, tolerance));
  return holdsText(normalizeAnswerText(answer), v);
}

/**
 * The checks of a value-answer task judged by its outcome: when `checks` ask for values in the answer and check no
 * state and call no tool that writes (`readOnly` says which do not), their tool_called checks give way to answer_value checks (the value in the answer and in an executed
 * result, whichever tool gave it), which keep those calls as `via`. Others (writes and their state checks, a call
 * that is the task itself) come back unchanged.
 */
export function valueAnswerChecks(checks: Check[], readOnly: (tool: string) => boolean): Check[] {
  if (checks.some(isStateCheck) || !checks.some((c) => c.kind === 'answer_contains')) return checks;
  // A write's own answer ("the new state is Started"): making that call is the task.
  if (checks.some((c) => c.kind === 'tool_called' && !readOnly(c.tool))) return checks;
  const via = checks.flatMap((c) => (c.kind === 'tool_called' ? [{ tool: c.tool, args: c.args }] : []));
  return checks.flatMap((c): Check[] => {
    if (c.kind === 'answer_contains') return [{ kind: 'answer_value', value: c.value, ...(via.length ? { via } : {}) }];
    return c.kind === 'tool_called' ? [] : [c];
  });
}

/** The calls a check records as where its value or its change came from: a tool_called check's, an answer_value's `via`. */
export function checkedCalls(checks: readonly Check[]): { tool: string; args: Record<string, unknown> }[] {
  return checks.flatMap((c) => (c.kind === 'tool_called' ? [{ tool: c.tool, args: c.args }] : c.kind === 'answer_value' ? (c.via ?? []) : []));
}
