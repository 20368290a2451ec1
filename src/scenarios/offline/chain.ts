/**
 * Task shape chain (difficulty 3–4): the task names an entity by its label ("the book "The Quiet Orchard"", "the
 * author of …"), so the agent must find the id with one tool before using it with another.
 */
import type { ToolCallOutcome, ToolInfo } from '../../mcp/index.js';
import { validates } from '../json-schema-args.js';
import { chooseAnswer } from './answer.js';
import { requiredNames } from './arguments.js';
import type { Discovery } from './discovery.js';
import type { Generation } from './generation.js';
import type { Drawn } from './types.js';
import { questionFill } from './phrasing.js';
import { idStem, label, toolNoun } from './wording.js';

/** Tools whose only required argument is an id of `noun`. */
const idTools = (g: Generation, noun: string): { tool: ToolInfo; param: string }[] =>
  g.usableTools().flatMap((tool) => {
    const req = requiredNames(tool);
    if (req.length !== 1) return [];
    const p = req[0];
    const stem = idStem(p) ?? (p.toLowerCase() === 'id' ? toolNoun(tool.name) : undefined);
    return stem === noun ? [{ tool, param: p }] : [];
  });

export interface ChainStart {
  subject: string;
  tool: ToolInfo;
  args: Record<string, unknown>;
  out: ToolCallOutcome;
  hops: number;
}

/** An entity named by its label, resolved to an id that a single-id tool takes. */
export async function chainStart(g: Generation, known: Discovery): Promise<ChainStart | 'unverifiable' | undefined> {
  const labelled = known.labelled();
  if (!labelled.length) return undefined;
  const { rec, label: name } = g.rng.pick(labelled);
  const links: { field: string; noun: string; hops: number }[] = [];
  if (rec.fields.id !== undefined) links.push({ field: 'id', noun: rec.noun, hops: 1 });
  for (const k of Object.keys(rec.fields)) {
    const stem = idStem(k);
    if (stem) links.push({ field: k, noun: stem, hops: stem === rec.noun ? 1 : 2 });
  }
  const options = links.flatMap((l) => idTools(g, l.noun).map((t) => ({ ...l, ...t })));
  if (!options.length) return undefined;
  const pick = g.rng.pick(options);
  const args = { [pick.param]: rec.fields[pick.field] };
  if (!validates(pick.tool.inputSchema, args)) return undefined;
  const out = await g.call(pick.tool.name, args);
  if (out.isError) {
    g.note(pick.tool.name, 'calls_failed');
    return 'unverifiable';
  }
  const subject = pick.hops === 1 ? `the ${rec.noun} "${name}"` : `the ${label(pick.noun)} of the ${rec.noun} "${name}"`;
  return { subject, tool: pick.tool, args, out, hops: pick.hops };
}

/** A chain: find the id from a label, then use it. */
export async function chain(g: Generation, known: Discovery): Promise<Drawn> {
  const start = await chainStart(g, known);
  if (!start || start === 'unverifiable') return start;
  const answer = chooseAnswer(start.out, start.args, start.tool, g.rng);
  if (!answer || answer.kind !== 'field') {
    g.note(start.tool.name, 'nothing_to_ask');
    return undefined;
  }
  const { family, fill } = questionFill(answer, start.subject);
  const task = g.render(family, fill);
  return {
    task,
    difficulty: 2 + start.hops,
    checks: [{ kind: 'tool_called', tool: start.tool.name, args: start.args }, ...answer.values.map((value) => ({ kind: 'answer_contains' as const, value }))],
  };
}
