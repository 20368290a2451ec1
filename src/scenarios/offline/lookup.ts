/** Task shape lookup (difficulty 1–2): one call, what it is about stated in the task in plain words. */
import type { ToolCallOutcome, ToolInfo } from '../../mcp/index.js';
import { synthesizeArgs, validates, type JsonSchema } from '../json-schema-args.js';
import { answerContains, type Check } from '../scenario.js';
import { chooseAnswer, type Answer } from './answer.js';
import { canonical, entityKey, GLOB_NAMES, MEDIA_FILE, pathKind, requiredNames, SEARCH_NAMES, withFixed } from './arguments.js';
import type { Discovery } from './discovery.js';
import type { Generation } from './generation.js';
import { convertsToOwnUnit, question, writeSentence } from './phrasing.js';
import type { Candidate, Drawn } from './types.js';
import { isFiller, stringLeaves } from './values.js';

/** Argument draws for one lookup: arguments that failed are drawn again, up to this many times. */
const ARG_DRAWS = 4;

/** Optional arguments that only change how a result is laid out: a question never needs them. */
const LAYOUT_NAMES = /sort|order|format|mode|page|offset|cursor|limit|max|include|exclude|head|tail|verbose/i;

/**
 * A lookup: one call with stated arguments (`forced`: of this tool). Arguments that fail are drawn again. Optional
 * arguments are left out (the server's default), but for a filter now and then (a genre, a country, a branch).
 */
export async function lookup(g: Generation, known: Discovery, forced?: ToolInfo): Promise<Drawn> {
  const pool = g.usableTools();
  if (!pool.length) return undefined;
  const tool = forced ?? g.leastTried(pool);
  const missing = known.missingReason(tool);
  if (missing) {
    g.note(tool.name, 'no_discoverable_arguments', missing);
    return undefined;
  }
  let args: Record<string, unknown> = {};
  let out: ToolCallOutcome | undefined;
  for (let draw = 0; draw < ARG_DRAWS && !g.disabled.has(tool.name); draw++) {
    try {
      args = withFixed(tool.inputSchema, withFilter(g, known, tool, synthesizeArgs(tool.inputSchema, { rng: g.rng, optionalRate: 0, candidates: known.candidates(tool) })));
      args = twoFiles(g, known, tool, args);
    } catch {
      g.note(tool.name, 'no_discoverable_arguments');
      return undefined;
    }
    // Stand-in text ("hello world") is no value of this server's: a person would not ask about it.
    if (stringLeaves(args).some(isFiller)) {
      g.note(tool.name, 'no_discoverable_arguments', "no value from the server's own data for a text it takes");
      return undefined;
    }
    const key = `${tool.name} ${canonical(args)}`;
    // A conversion to the unit the amount is already in ("71 USD in USD") is no question a person asks.
    if (g.failedArgs.has(key) || convertsToOwnUnit(tool, args)) continue;
    out = await g.call(tool.name, args);
    if (!out.isError) break;
    g.failedArgs.add(key);
  }
  if (!out && convertsToOwnUnit(tool, args)) return undefined;
  if (!out || out.isError) {
    g.note(tool.name, 'calls_failed', out?.text);
    return 'unverifiable';
  }
  // A read whose result holds nothing to ask about makes no task: "run it" has no outcome to judge.
  let answer = chooseAnswer(out, args, tool, g.rng);
  // A listing too long to ask about (every author) is asked narrowed by a filter the tool takes (the authors from
  // Japan): left to chance, a tool whose unfiltered reply has nothing to ask could go without a task.
  const narrowed = answer ? args : withFilter(g, known, tool, args, true);
  if (narrowed !== args) {
    const again = await g.call(tool.name, narrowed);
    const found = again.isError ? undefined : chooseAnswer(again, narrowed, tool, g.rng);
    if (found) [args, answer] = [narrowed, found];
  }
  if (!answer) {
    g.note(tool.name, 'nothing_to_ask');
    return undefined;
  }
  if (tool.annotations.readOnlyHint === true && (await answeredElsewhere(g.call.bind(g), tool, args, answer))) {
    g.note(tool.name, 'nothing_to_ask', 'its answer is the same for other values of what the task states');
    return undefined;
  }
  return asked(g, known, tool, args, answer);
}

/** Calls that contrast with one another: at most this many per lookup. */
const CONTRASTS = 4;

/**
 * The same call with another value of one enum argument: of those the task states, or, when it states none, of the
 * optional ones the call left to their default (the weather of another city; a resource of the other type).
 */
export function contrastArgs(tool: ToolInfo, args: Record<string, unknown>): Record<string, unknown>[] {
  const props = (tool.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
  const enums = Object.entries(props).filter(([k, s]) => Array.isArray(s.enum) && (Object.keys(args).length ? k in args : true));
  const out: Record<string, unknown>[] = [];
  for (const [k, s] of enums) {
    // An argument left out takes its default: that value is the asked call itself.
    const asked = k in args ? args[k] : s.default;
    for (const v of s.enum as unknown[]) if (v !== asked && out.length < CONTRASTS) out.push({ ...args, [k]: v });
  }
  return out.filter((a) => validates(tool.inputSchema, a));
}

/**
 * Whether a call the task does not ask for shows every value of `answer` too (New York's humidity is Chicago's; a
 * blob's MIME type is a text's): then its checks cannot tell the asked call from another, and one random call of the
 * tool passes them.
 */
export async function answeredElsewhere(call: (tool: string, args: Record<string, unknown>) => Promise<ToolCallOutcome>, tool: ToolInfo, args: Record<string, unknown>, answer: Answer): Promise<boolean> {
  for (const other of contrastArgs(tool, args)) {
    const out = await call(tool.name, other);
    if (!out.isError && answer.values.every((v) => answerContains(out.text, v))) return true;
  }
  return false;
}

/**
 * A list of paths given one file gets a second (another text file discovery read): asked about one file, a tool
 * that reads several is the same question as any file reader's; about two, it is its own.
 */
function twoFiles(g: Generation, known: Discovery, tool: ToolInfo, args: Record<string, unknown>): Record<string, unknown> {
  const entry = Object.entries(args).find(([k, v]) => entityKey(k) === 'path' && Array.isArray(v) && v.length === 1);
  if (!entry) return args;
  const others = [...known.contentOf.keys()].filter((p) => p !== (entry[1] as unknown[])[0] && !known.folders.has(p) && !MEDIA_FILE.test(p));
  if (!others.length) return args;
  const out = { ...args, [entry[0]]: [...(entry[1] as unknown[]), g.rng.pick(others)] };
  return validates(tool.inputSchema, out) ? out : args;
}

/**
 * `args` with, now and then (`always`: surely, when the tool takes one), one optional filter the tool takes (an enum
 * value, or a discovered value of its key); `args` itself when none is added.
 */
function withFilter(g: Generation, known: Discovery, tool: ToolInfo, args: Record<string, unknown>, always = false): Record<string, unknown> {
  const props = (tool.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set(requiredNames(tool));
  const filters = Object.entries(props).filter(([k, s]) => {
    if (required.has(k) || k in args || LAYOUT_NAMES.test(k) || SEARCH_NAMES.test(k) || GLOB_NAMES.test(k) || entityKey(k) === 'path') return false;
    return (Array.isArray(s.enum) && s.enum.every((x) => typeof x === 'string')) || (s.type === 'string' && (known.keyValues.get(k)?.length ?? 0) > 0);
  });
  if (!filters.length || (!always && !g.rng.chance(0.3))) return args;
  const [k, s] = g.rng.pick(filters);
  const v = g.rng.pick((Array.isArray(s.enum) ? s.enum : known.keyValues.get(k)!) as unknown[]);
  const out = { ...args, [k]: v };
  return validates(tool.inputSchema, out) ? out : args;
}

/**
 * The task that asks for `answer` from a call of `tool` with `args`, and its checks; undefined when the arguments
 * do not read as plain words. A tool that writes (`change`) is asked to make the change first.
 */
export function asked(g: Generation, known: Discovery, tool: ToolInfo, args: Record<string, unknown>, answer: Answer): Candidate | undefined {
  const isFolder = (p: string) => known.folders.has(p) || pathKind(tool) === 'folder';
  const check: Check = { kind: 'tool_called', tool: tool.name, args };
  const checks = [check, ...answer.values.map((value) => ({ kind: 'answer_contains' as const, value }))];
  if (tool.annotations.readOnlyHint !== true) {
    const change = writeSentence(tool, args, isFolder);
    if (!change) return undefined;
    return { task: g.render('writeThenAnswer', { change: change.subject, field: answer.field }), difficulty: 2, checks, mentions: change.mentions };
  }
  const q = question(tool, args, answer, isFolder);
  if (!q) {
    g.note(tool.name, 'nothing_to_ask');
    return undefined;
  }
  const task = g.render(q.family, q.fill);
  const difficulty = answer.kind !== 'field' || Object.keys(args).length >= 2 ? 2 : 1;
  return { task, difficulty, checks, mentions: q.mentions };
}
