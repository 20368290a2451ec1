/** Task shape lookup (difficulty 1–2): one call, its arguments stated in the task. */
import type { ToolCallOutcome, ToolInfo } from '../../mcp/index.js';
import { synthesizeArgs } from '../json-schema-args.js';
import type { Check } from '../scenario.js';
import { chooseAnswer, type Answer } from './answer.js';
import { canonical, withFixed } from './arguments.js';
import type { Discovery } from './discovery.js';
import type { Generation } from './generation.js';
import type { Candidate, Drawn } from './types.js';
import { actionPhrase, argsPhrase, idStem, isIdName, toolNoun } from './wording.js';

/** Argument draws for one lookup: arguments that failed are drawn again, up to this many times. */
const ARG_DRAWS = 4;

/** A lookup: one call with stated arguments (`forced`: of this tool). Arguments that fail are drawn again. */
export async function lookup(g: Generation, known: Discovery, forced?: ToolInfo): Promise<Drawn> {
  const pool = g.usableTools();
  if (!pool.length) return undefined;
  const tool = forced ?? g.leastTried(pool);
  let args: Record<string, unknown> = {};
  let out: ToolCallOutcome | undefined;
  for (let draw = 0; draw < ARG_DRAWS && !g.disabled.has(tool.name); draw++) {
    try {
      args = withFixed(tool.inputSchema, synthesizeArgs(tool.inputSchema, { rng: g.rng, optionalRate: 0.3, candidates: known.candidates(tool) }));
    } catch {
      g.note(tool.name, 'no_discoverable_arguments');
      return undefined;
    }
    const key = `${tool.name} ${canonical(args)}`;
    if (g.failedArgs.has(key)) continue;
    out = await g.call(tool.name, args);
    if (!out.isError) break;
    g.failedArgs.add(key);
  }
  if (!out || out.isError) {
    g.note(tool.name, 'calls_failed', out?.text);
    return 'unverifiable';
  }
  const answer = chooseAnswer(out, args, tool, g.rng);
  const keys = Object.keys(args);
  const argText = keys.length ? argsPhrase(args) : 'no arguments';
  const check: Check = { kind: 'tool_called', tool: tool.name, args };
  if (!answer) {
    if (!keys.length) {
      g.note(tool.name, 'nothing_to_ask');
      return undefined; // "do X with no arguments" and nothing to check in the answer: too vague.
    }
    return { task: g.render('actionOnly', { action: actionPhrase(tool), args: argText }), difficulty: 1, checks: [check] };
  }
  return asked(g, tool, args, answer);
}

/** The task that asks for `answer` from a call of `tool` with `args`, and its checks. */
export function asked(g: Generation, tool: ToolInfo, args: Record<string, unknown>, answer: Answer): Candidate {
  const keys = Object.keys(args);
  const argText = keys.length ? argsPhrase(args) : 'no arguments';
  const check: Check = { kind: 'tool_called', tool: tool.name, args };
  const single = keys.length === 1 && isIdName(keys[0]) && typeof args[keys[0]] === 'string';
  let task: string;
  if (answer.kind === 'list') task = g.render('actionList', { action: actionPhrase(tool), args: argText, field: answer.field, noun: answer.noun });
  else if (answer.kind === 'values') task = keys.length ? g.render('actionValues', { action: actionPhrase(tool), args: argText, field: answer.field }) : g.render('noArgsValues', { action: actionPhrase(tool), field: answer.field });
  else if (single) task = g.render('field', { field: answer.field, subject: `the ${idStem(keys[0]) ?? toolNoun(tool.name)} ${args[keys[0]] as string}` });
  else if (keys.length) task = g.render('actionField', { action: actionPhrase(tool), args: argText, field: answer.field });
  else task = g.render('noArgsField', { action: actionPhrase(tool), field: answer.field });
  const difficulty = answer.kind !== 'field' || keys.length >= 2 ? 2 : 1;
  return { task, difficulty, checks: [check, ...answer.values.map((value) => ({ kind: 'answer_contains' as const, value }))] };
}
