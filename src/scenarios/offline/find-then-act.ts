/** Task shape find → act: a lookup or a write whose entity the task names by a clue the agent must follow first. */
import { validates } from '../json-schema-args.js';
import { answerContains } from '../scenario.js';
import { requiredNames, SEARCH_NAMES, uniqueLines } from './arguments.js';
import type { Discovery } from './discovery.js';
import type { Generation } from './generation.js';
import { lookup } from './lookup.js';
import type { Drawn } from './types.js';
import { stringLeaves } from './values.js';
import { write } from './write.js';

/** A read-only search tool called with `text` as its one required argument, when the server has one. */
function searchFor(g: Generation, text: string): { tool: string; args: Record<string, unknown> } | undefined {
  for (const t of g.usableTools()) {
    const req = requiredNames(t);
    const args = { [req[0]]: text };
    if (req.length === 1 && SEARCH_NAMES.test(req[0]) && validates(t.inputSchema, args)) return { tool: t.name, args };
  }
  return undefined;
}

interface Clue {
  /** The words that name the value in a task ('the person noted as "backend engineer"'). */
  text: string;
  /** What the clue quotes ("backend engineer"). */
  quotes: string;
  /** The read-only call a solver makes to go from the clue to the value, and what its result must show. */
  find: { tool: string; args: Record<string, unknown> };
  shows: string;
}

/**
 * What names a discovered value without saying it: a list item unique to its record (found again by searching for
 * it), or a line that only its file holds (found by reading the file).
 */
function cluesFor(g: Generation, known: Discovery, v: string): Clue[] {
  const out: Clue[] = [];
  for (const rec of known.recs) {
    if (!Object.values(rec.fields).includes(v)) continue;
    // What kind of thing it is, in the record's own words when it says ("person"), else its noun.
    const typed = Object.entries(rec.fields).find(([k, t]) => /type$/i.test(k) && typeof t === 'string' && /^[a-z][a-z ]{1,20}$/i.test(t));
    const kind = typed ? String(typed[1]) : rec.noun;
    for (const xs of Object.values(rec.lists ?? {})) {
      for (const x of xs) {
        if (x.length < 4 || x.length > 60 || answerContains(x, v) || known.owners(x) !== 1) continue;
        const find = searchFor(g, x);
        if (find) out.push({ text: `the ${kind} noted as "${x}"`, quotes: x, find, shows: v });
      }
    }
  }
  const read = known.contentOf.get(v);
  if (read && !known.folders.has(v)) {
    for (const line of uniqueLines(read.text)) {
      const l = line.trim();
      if ([...known.contentOf].some(([p, o]) => p !== v && o.text.includes(l))) continue;
      // The folder is named (as a person would), so the agent knows where to look.
      const dir = v.includes('/') ? v.slice(0, v.lastIndexOf('/')) : '';
      out.push({ text: `the file ${dir ? `in "${dir}" ` : ''}that contains the line "${l}"`, quotes: l, find: { tool: read.tool, args: read.args }, shows: l });
    }
  }
  return out;
}

/**
 * Find → act: a lookup or a write whose entity the task names by a clue, so the agent must find it first (search
 * for the clue, or read the files), then inspect or change it. The found value feeds the checked call.
 */
export async function findThenAct(g: Generation, known: Discovery): Promise<Drawn> {
  const base = g.writeTools.length && g.opts.isolatedServer && g.rng.chance(0.5) ? await write(g, known) : await lookup(g, known);
  if (!base || base === 'unverifiable') return base;
  const first = base.checks.find((k) => k.kind === 'tool_called');
  if (first?.kind !== 'tool_called') return undefined;
  // The values the task states, each with the words that say it: a clue stands in for those words.
  const mentions = base.mentions ?? {};
  const named = [...new Set(stringLeaves(first.args))].filter((v) => known.isKnown(v) && mentions[v] !== undefined && base.task.includes(mentions[v]));
  // A clue never quotes what the task says already (the line an edit replaces or writes, a note it adds): a person
  // names a file by one line and asks for a change to another.
  const options = named.flatMap((v) => cluesFor(g, known, v).filter((c) => !base.task.includes(c.quotes)).map((c) => ({ v, ...c })));
  if (!options.length) return undefined;
  const pick = g.rng.pick(options);
  const task = base.task.split(mentions[pick.v]).join(pick.text);
  // Named another way too (a path's base name): no finding needed.
  if (answerContains(task.split(pick.text).join(''), pick.v)) return undefined;
  // The solver's find step, replayed: the clue leads to the value.
  const out = await g.call(pick.find.tool, pick.find.args, true);
  if (out.isError || !answerContains(out.text, pick.shows)) return 'unverifiable';
  return { ...base, task, difficulty: Math.min(5, base.difficulty + 2) };
}
