/** Task shape flow (difficulty 4–5): a number read from one tool's output feeds another tool's argument. */
import type { ToolInfo } from '../../mcp/index.js';
import { synthesizeArgs, validates, type JsonSchema } from '../json-schema-args.js';
import { chooseAnswer } from './answer.js';
import { requiredNames } from './arguments.js';
import { chainStart } from './chain.js';
import type { Discovery } from './discovery.js';
import type { Generation } from './generation.js';
import { leaves, outcomeData } from './output.js';
import type { Drawn } from './types.js';
import { aboutWords, convertsToOwnUnit, questionFill, subjectOf } from './phrasing.js';
import { label, words } from './wording.js';

/** A flow: a number from one output becomes another tool's argument. */
export async function flow(g: Generation, known: Discovery): Promise<Drawn> {
  const start = await chainStart(g, known);
  if (!start || start === 'unverifiable') return start;
  const nums = leaves(outcomeData(start.out)).filter((l) => typeof l.value === 'number');
  const options: { key: string; value: number; tool: ToolInfo; param: string }[] = [];
  for (const n of nums) {
    const key = n.path[n.path.length - 1];
    const keyWords = new Set(words(key).filter((w) => w !== 'id' && w.length >= 3));
    for (const tool of g.usableTools()) {
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
  const pick = g.rng.pick(options);
  let rest: Record<string, unknown>;
  try {
    const full = synthesizeArgs(pick.tool.inputSchema, { rng: g.rng, optionalRate: 0, candidates: known.candidates(pick.tool) });
    rest = Object.fromEntries(Object.entries(full).filter(([k]) => k !== pick.param));
  } catch {
    return undefined;
  }
  const args = { ...rest, [pick.param]: pick.value };
  if (!validates(pick.tool.inputSchema, args) || convertsToOwnUnit(pick.tool, args)) return undefined;
  const out = await g.call(pick.tool.name, args);
  if (out.isError) {
    g.note(pick.tool.name, 'calls_failed');
    return 'unverifiable';
  }
  const answer = chooseAnswer(out, args, pick.tool, g.rng);
  if (!answer || answer.kind !== 'field') {
    g.note(pick.tool.name, 'nothing_to_ask');
    return undefined;
  }
  // What the found value feeds, said as what it is of: "the price in USD of the book "X"", then the rest ("in EUR").
  const inner = `the ${label(pick.key)} of ${start.subject}`;
  const about = aboutWords(pick.tool);
  const restText = Object.keys(rest).length ? subjectOf(pick.tool, rest, { isFolder: (p) => known.folders.has(p) })?.subject : '';
  if (restText === undefined) return undefined;
  const tail = restText.startsWith(`the ${about} `) ? restText.slice(`the ${about} `.length) : restText.startsWith('the ') ? '' : restText;
  if (restText && !tail) return undefined;
  const { fill } = questionFill(answer, `${inner}${tail ? ` ${tail}` : ''}`);
  // Templates that name the found value first refer back to it ("…; then tell me the rate of it in EUR").
  const task = g.render('flow', { ...fill, inner, it: `it${tail ? ` ${tail}` : ''}` });
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
