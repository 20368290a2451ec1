/** Task shape write: a change asked for in plain words, replayed on isolated servers and checked by the state it leaves. */
import type { ToolCallOutcome, ToolInfo } from '../../mcp/index.js';
import type { Rng } from '../../util/rng.js';
import { synthesizeArgs, validates, type CandidateContext } from '../json-schema-args.js';
import { answerContains } from '../scenario.js';
import { chooseAnswer } from './answer.js';
import { canonical, entityKey, FILE_TEXT_NAMES, fixedCandidates, FOLDER_WORDS, hasKey, MEDIA_FILE, NEW_PATH_NAMES, NEW_TEXT_NAMES, OLD_TEXT_NAMES, REF_NAMES, smallAmounts, uniqueLines, withFixed, withOldText } from './arguments.js';
import type { Discovery } from './discovery.js';
import type { Generation } from './generation.js';
import { asked } from './lookup.js';
import { replayOnIsolated } from './replay.js';
import { stateCheckOf, stateReaders, writeEvidence } from './state-checks.js';
import type { Drawn, OfflineOptions } from './types.js';
import { isFiller, isPlainObject, stringLeaves, walkObjects } from './values.js';
import { writeSentence } from './phrasing.js';
import { isIdName, words } from './wording.js';

/**
 * A write: a change asked for in plain words, replayed by a scripted solver on an isolated server, and checked by
 * what a read-only tool shows afterwards (which a fresh server without the change must not show).
 */
export async function write(g: Generation, known: Discovery, forced?: ToolInfo): Promise<Drawn> {
  const open = g.opts.isolatedServer;
  if (!open || !g.writeTools.length) return undefined;
  const tool = forced ?? g.leastTried(g.writeTools);
  const args = writeArgs(g, known, tool);
  if (!args) return undefined;
  const evidence = writeEvidence(args, known.isKnown);
  const readers = stateReaders(g.usableTools(), evidence.readerValues);
  const replayed = await replayOnIsolated(open, [{ tool: tool.name, args }], readers, g.callTimeoutMs);
  if ('failed' in replayed) {
    g.note(tool.name, 'calls_failed', replayed.detail);
    return 'unverifiable';
  }
  const state = readers.length ? stateCheckOf(readers, replayed, evidence) : undefined;
  if (!state) {
    // No reader can be asked about what it wrote (a toggle, a file made as a resource, on a server whose readers
    // take none of its values): a write that destroys nothing is asked about its own result instead.
    if (tool.annotations.destructiveHint === false && !readers.some((r) => Object.keys(r.args).length)) return ownResult(g, known, open, tool, args, replayed.outputs[0]);
    g.note(tool.name, readers.length ? 'replay_failed' : 'nothing_to_ask');
    return readers.length ? 'unverifiable' : undefined;
  }
  const change = writeSentence(tool, args, (p) => known.folders.has(p));
  if (!change) {
    g.note(tool.name, 'nothing_to_ask');
    return undefined;
  }
  return {
    task: g.render('write', { change: change.subject }),
    mentions: change.mentions,
    difficulty: evidence.strings.length > 2 ? 3 : 2,
    checks: [{ kind: 'tool_called', tool: tool.name, args }, state],
    verified: true,
  };
}

/**
 * A task on what a write answers itself, when no reader shows the change: the result it gave on a fresh server is
 * the ground truth only if a second fresh server gives it again (a toggle answers "Started" on a fresh server, and
 * every rollout gets one). Asked as the change, then the question.
 */
async function ownResult(g: Generation, known: Discovery, open: NonNullable<OfflineOptions['isolatedServer']>, tool: ToolInfo, args: Record<string, unknown>, out: ToolCallOutcome): Promise<Drawn> {
  const answer = chooseAnswer(out, args, tool, g.rng);
  if (!answer) {
    g.note(tool.name, 'nothing_to_ask');
    return undefined;
  }
  const again = await replayOnIsolated(open, [{ tool: tool.name, args }], [], g.callTimeoutMs);
  if ('failed' in again || !answer.values.every((v) => answerContains(again.outputs[0].text, v))) {
    g.note(tool.name, 'replay_failed');
    return 'unverifiable';
  }
  const c = asked(g, known, tool, args, answer);
  return c ? { ...c, verified: true } : undefined;
}

/**
 * Arguments for a write tool, or undefined (noted) when none can be built. `after`: the arguments of a write before
 * it in the same task: a reference to an entity takes one of the values that write creates (madeBy), and a note that
 * write already gives a thing is not given it again.
 */
export function writeArgs(g: Generation, known: Discovery, tool: ToolInfo, after?: Record<string, unknown>): Record<string, unknown> | undefined {
  const made = after ? madeBy(known, after) : undefined;
  // A reference to something (entityName, book_id) takes a discovered value; what the write creates is new.
  // A destructive tool removes what exists, so every value it takes is a discovered one (observations to delete).
  const destructive = tool.annotations.destructiveHint !== false;
  // An edit replaces text that is there: its path is a file whose content discovery read.
  const edits = hasKey(tool.inputSchema, OLD_TEXT_NAMES);
  const writesFile = Object.keys(tool.inputSchema.properties ?? {}).some((k) => entityKey(k) === 'path');
  const refs = (ctx: CandidateContext) => {
    if (!ctx.name) return undefined;
    const fixed = fixedCandidates(ctx.name, ctx.schema);
    if (fixed) return fixed;
    const ref = made && entityKey(ctx.name) ? made.get(entityKey(ctx.name)!) : undefined;
    if (ref?.length && (isIdName(ctx.name) || words(ctx.name).length >= 2)) return ref;
    if (edits && entityKey(ctx.name) === 'path') return [...known.contentOf.keys()].filter((p) => !known.folders.has(p));
    // An amount a person asks for in one change is small, and a large one is likelier refused (stock, limits).
    if ((ctx.schema.type === 'integer' || ctx.schema.type === 'number') && !isIdName(ctx.name)) return smallAmounts(ctx.schema);
    // Text that replaces a line, or that a write puts in a file: a line another file holds (the folder's own words),
    // never stand-in text nor a value of another key (a listing's "file" type).
    if (NEW_TEXT_NAMES.test(ctx.name) || (FILE_TEXT_NAMES.test(ctx.name) && writesFile)) return fileLines(known);
    if (REF_NAMES.test(ctx.name)) return (known.keyValues.get('path') ?? []).filter((p) => typeof p === 'string' && /\/[^/]+\.[a-z0-9]+$/i.test(p));
    if (isIdName(ctx.name) || (words(ctx.name).length >= 2 && entityKey(ctx.name))) return known.candidates(tool)(ctx);
    if (destructive) {
      const listed = known.listValues.get(ctx.name);
      return listed?.length ? listed : known.candidates(tool)(ctx);
    }
    return domainValues(known, ctx) ?? (made ? newPersonValues(ctx, [...made.values()].flat()) : undefined);
  };
  let args: Record<string, unknown>;
  try {
    args = withFixed(tool.inputSchema, synthesizeArgs(tool.inputSchema, { rng: g.rng, optionalRate: 0, candidates: refs }));
  } catch {
    g.note(tool.name, 'no_discoverable_arguments');
    return undefined;
  }
  if (edits) {
    const file = Object.entries(args).find(([k]) => entityKey(k) === 'path')?.[1];
    const content = typeof file === 'string' ? known.contentOf.get(file)?.text : undefined;
    if (content === undefined) {
      g.note(tool.name, 'no_discoverable_arguments');
      return undefined;
    }
    args = withOldText(args, uniqueLines(content), g.rng);
  } else {
    const placed = newPathsBeside(known, args, FOLDER_WORDS.test(words(tool.name).join(' ')), g.rng);
    if (!placed) {
      g.note(tool.name, 'no_discoverable_arguments', 'no name for a new path from the folder\'s own words');
      return undefined;
    }
    args = placed;
  }
  args = fittingKinds(known, args, g.rng, destructive);
  // A link joins two things: one drawn to itself ends at another thing made first, when there is one. Repeats are
  // dropped after this, since a link so mended may become one the request already holds.
  const others = (v: unknown) => [...(made?.values() ?? [])].flat().filter((x) => x !== v);
  let selfLink = false;
  walkObjects(args, (o) => {
    if (typeof o.from !== 'string' || o.from !== o.to) return;
    if (others(o.from).length) o.to = g.rng.pick(others(o.from));
    else selfLink = true;
  });
  if (selfLink) {
    g.note(tool.name, 'no_discoverable_arguments', 'a link from a thing to itself');
    return undefined;
  }
  args = distinctItems(args);
  if (after) {
    const rest = withoutGiven(args, after);
    if (!rest) {
      g.note(tool.name, 'no_discoverable_arguments', 'every note it would add was given by the write before it');
      return undefined;
    }
    args = rest;
  }
  // Stand-in text ("hello world") means nothing on this server: such a write is no task a person would ask for.
  if (stringLeaves(args).some(isFiller) || !validates(tool.inputSchema, args)) {
    g.note(tool.name, 'no_discoverable_arguments', 'no value from the server\'s own data for a text it writes');
    return undefined;
  }
  return args;
}

/** The lines the folder's text files hold (what a search for files printed, a path per line, is none). */
function fileLines(known: Discovery): string[] {
  const files = [...known.contentOf.entries()].filter(([p]) => !known.folders.has(p) && !MEDIA_FILE.test(p));
  return files.flatMap(([, c]) => uniqueLines(c.text)).filter((l) => !/^\s*(\{sandbox\}|\/)\S*$/.test(l));
}

/**
 * `args` with every list's repeated items dropped, however deep: a person asks for a change once, not twice in a row,
 * and links two things once ("record that A owns B and record that A works on B" is one request said twice).
 */
function distinctItems<T>(v: T): T {
  if (Array.isArray(v)) {
    const items = v.map(distinctItems);
    const part = (x: unknown) => (isPlainObject(x) && typeof x.from === 'string' && typeof x.to === 'string' ? canonical([x.from, x.to]) : canonical(x));
    return items.filter((x, i) => items.findIndex((y) => part(y) === part(x)) === i) as T;
  }
  return isPlainObject(v) ? (Object.fromEntries(Object.entries(v).map(([k, x]) => [k, distinctItems(x)])) as T) : v;
}

/** The name a record is about (name, entityName), if it names one. */
const nameOf = (o: Record<string, unknown>) => Object.entries(o).find(([k, v]) => entityKey(k) === 'name' && typeof v === 'string')?.[1] as string | undefined;
const textLists = (o: Record<string, unknown>) => Object.entries(o).filter((e): e is [string, string[]] => Array.isArray(e[1]) && e[1].length > 0 && e[1].every((x) => typeof x === 'string'));

/**
 * `use` without the notes `given` (a write before it in one request) already gives the same thing: "add Sam with the
 * note X, then add X to Sam" asks the second part for nothing. Undefined when a record is left with none.
 */
function withoutGiven(use: Record<string, unknown>, given: Record<string, unknown>): Record<string, unknown> | undefined {
  const notes = new Map<string, Set<string>>();
  walkObjects(given, (o) => {
    const name = nameOf(o);
    if (name) for (const [, xs] of textLists(o)) for (const x of xs) notes.set(name, (notes.get(name) ?? new Set()).add(x));
  });
  const out = structuredClone(use);
  let emptied = false;
  walkObjects(out, (o) => {
    const had = notes.get(nameOf(o) ?? '');
    if (!had) return;
    for (const [k, xs] of textLists(o)) {
      o[k] = xs.filter((x) => !had.has(x));
      if (!(o[k] as string[]).length) emptied = true;
    }
  });
  return emptied ? undefined : out;
}

/**
 * Values a write that makes something new may take from what is there (never stand-in text): the values already in
 * use under the same key (an entity type, a relation's ends and type), and for a list of notes, the notes that other
 * records hold. Undefined for a name or a path, which is new.
 */
function domainValues(known: Discovery, ctx: CandidateContext): readonly unknown[] | undefined {
  const name = ctx.name!;
  if (entityKey(name) && words(name).length === 1) return undefined;
  const same = known.keyValues.get(name);
  if (same?.length && ctx.schema.type !== 'array') return same;
  const listed = known.listValues.get(name);
  if (listed?.length) return listed;
  // A list of strings with nothing under its own key (add_observations' "contents"): the notes of any record.
  if (ctx.schema.type === 'string' && ctx.path.includes('[]')) {
    const notes = [...known.listValues.values()].flat().filter((v): v is string => typeof v === 'string' && v.length >= 4 && v.length <= 60 && !v.includes('/'));
    return notes.length ? [...new Set(notes)] : undefined;
  }
  return undefined;
}

/** A person's name as the generator makes one ("Nora Lindqvist"): what a thing on an empty graph is named. */
const PERSON_NAME = /^[A-Z][a-z]+ [A-Z][a-z]+$/;

/** What a person asks to note of, or to link between, people: no server holds it before they are added. */
const PERSON_NOTES = ['lives in Oslo', 'works as a nurse', 'speaks Portuguese', 'plays the violin', 'studies chemistry', 'was born in Lima'];
const PERSON_LINKS = ['knows', 'works with', 'is a friend of', 'is a neighbour of'];
const LINK_ENDS = /^(from|to)$/;

/**
 * Values a write takes about people the same task adds first (on an empty graph, where nothing is there to take
 * from): a note for its list of notes (add_observations' "contents"), a link type for a relation between them.
 * Undefined unless every thing made is a person, and for any other argument.
 */
function newPersonValues(ctx: CandidateContext, madeValues: readonly string[]): readonly string[] | undefined {
  if (!madeValues.length || !madeValues.every((v) => PERSON_NAME.test(v)) || ctx.schema.type !== 'string') return undefined;
  if (TYPE_KEY.test(ctx.name ?? '')) return PERSON_LINKS;
  // A link's ends (a relation's "from" and "to") are the people added.
  if (LINK_ENDS.test(ctx.name ?? '')) return madeValues;
  return ctx.path.includes('[]') && !entityKey(ctx.name ?? '') ? PERSON_NOTES : undefined;
}

/**
 * Records a write makes, fitted to what is there: at most two per write; a new named thing gets the kind most records
 * have ("person") and notes that things of its kind have; a link takes a type in use between the kinds it joins
 * ("works on" from a person to a project), never from a thing to itself nor one that exists; an email is made from
 * its name. A request a person would make, not random pairs of values. `removes`: the write deletes what it names.
 */
function fittingKinds(known: Discovery, args: Record<string, unknown>, rng: Rng, removes: boolean): Record<string, unknown> {
  const kinds = new Map<string, string>();
  const links: { from: string; to: string; type: string }[] = [];
  for (const r of known.recs) {
    const tk = Object.keys(r.fields).find((k) => TYPE_KEY.test(k));
    const t = tk ? r.fields[tk] : undefined;
    if (typeof t !== 'string') continue;
    if (typeof r.fields.name === 'string') kinds.set(r.fields.name, t);
    if (typeof r.fields.from === 'string' && typeof r.fields.to === 'string') links.push({ from: r.fields.from, to: r.fields.to, type: t });
  }
  const ofKind = (kind: string | undefined) => [...kinds].filter(([, k]) => k === kind).map(([n]) => n);
  const notesOf = (kind: string | undefined, except: string) =>
    [...new Set(known.recs.filter((r) => r.fields.name !== except && kinds.get(String(r.fields.name)) === kind).flatMap((r) => Object.values(r.lists ?? {}).flat()))];
  const fit = (v: unknown): unknown => {
    if (Array.isArray(v) && v.length && v.every(isPlainObject)) {
      // Two records about one thing are one request said twice: each named thing once.
      const named = (o: unknown) => Object.entries(o as Record<string, unknown>).find(([k]) => entityKey(k) === 'name')?.[1];
      return v.slice(0, 2).map(fit).filter((o, i, all) => named(o) === undefined || all.findIndex((x) => named(x) === named(o)) === i);
    }
    if (Array.isArray(v)) return v.map(fit);
    if (!isPlainObject(v)) return v;
    const o: Record<string, unknown> = Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fit(x)]));
    const keys = Object.keys(o);
    const typeKey = keys.find((k) => TYPE_KEY.test(k) && typeof o[k] === 'string');
    if (typeKey && typeof o.from === 'string' && typeof o.to === 'string' && links.length) {
      for (let i = 0; i < 10; i++) {
        const like = rng.pick(links);
        const from = rng.pick(ofKind(kinds.get(like.from)));
        const to = rng.pick(ofKind(kinds.get(like.to)));
        if (from && to && from !== to && !links.some((l) => l.from === from && l.to === to && l.type === like.type)) {
          Object.assign(o, { from, to, [typeKey]: like.type });
          break;
        }
      }
    }
    const nameKey = keys.find((k) => entityKey(k) === 'name' && typeof o[k] === 'string');
    const name = nameKey ? (o[nameKey] as string) : undefined;
    if (name && !known.isKnown(name) && typeKey) {
      // With no kind in use (an empty graph), a person's name is a person's.
      const common = mostCommon(known.recs.map((r) => r.fields[typeKey]).filter((x): x is string => typeof x === 'string'));
      if (common) o[typeKey] = common;
      else if (PERSON_NAME.test(name)) o[typeKey] = 'person';
    }
    const listKey = keys.find((k) => Array.isArray(o[k]) && (o[k] as unknown[]).length && (o[k] as unknown[]).every((x) => typeof x === 'string'));
    // A write that removes notes takes the thing's own (drawn from what is listed), never other things'.
    if (name && listKey && !removes) {
      // Notes that things of its kind have; none known, a new thing (one given a kind) starts with none. A thing that
      // is there and alone of its kind (the one office) gets none of another kind's notes: a thing with kin is noted.
      let about = name;
      if (!typeKey && kinds.has(name) && !notesOf(kinds.get(name), name).length) {
        const kin = [...kinds.keys()].filter((n) => notesOf(kinds.get(n), n).length);
        if (kin.length) o[nameKey!] = about = rng.pick(kin);
      }
      const pool = notesOf(typeKey ? (o[typeKey] as string) : kinds.get(about), about);
      if (pool.length) o[listKey] = rng.shuffle(pool).slice(0, Math.min(2, (o[listKey] as unknown[]).length));
      else if (typeKey) o[listKey] = (o[listKey] as string[]).filter((x) => !isFiller(x));
    }
    const emailKey = keys.find((k) => /email/i.test(k) && typeof o[k] === 'string');
    if (name && emailKey && /^[A-Za-z]+ [A-Za-z]+$/.test(name)) o[emailKey] = `${name.toLowerCase().replace(' ', '.')}@example.com`;
    return o;
  };
  return fit(args) as Record<string, unknown>;
}

/** A key that says what kind a record is (entityType, relationType), not the record's own "type" tag. */
const TYPE_KEY = /^\w+(Type|_type)$/;

function mostCommon(xs: readonly string[]): string | undefined {
  const n = new Map<string, number>();
  for (const x of xs) n.set(x, (n.get(x) ?? 0) + 1);
  return [...n].sort((a, b) => b[1] - a[1])[0]?.[0];
}

/** What a write creates that names a thing, by entity key: `entities: [{name: "Quill"}]` → name → ["Quill"]. */
export function madeBy(known: Discovery, args: Record<string, unknown>): Map<string, string[]> {
  const made = new Map<string, string[]>();
  walkObjects(args, (o) => {
    for (const [k, v] of Object.entries(o)) {
      const ek = entityKey(k);
      if (ek && typeof v === 'string' && !known.isKnown(v)) made.set(ek, [...(made.get(ek) ?? []), v]);
    }
  });
  return made;
}

/**
 * A path argument that names something new (a move's destination, a file to write) gets a name beside a discovered
 * path, in the same folder, so that it lies where the server may write; the name is a word of what that folder's
 * files say (a folder "bills" beside notes on bills), never stand-in text. Undefined when the folder's files say none.
 */
function newPathsBeside(known: Discovery, args: Record<string, unknown>, folder: boolean, rng: Rng): Record<string, unknown> | undefined {
  const knownPaths = (known.keyValues.get('path') ?? []).filter((p): p is string => typeof p === 'string' && p.includes('/'));
  if (!knownPaths.length) return args;
  const out = { ...args };
  for (const [k, v] of Object.entries(args)) {
    // A destination, or a path no listing showed (a folder to create): a new name in a discovered folder.
    if (typeof v !== 'string' || !(NEW_PATH_NAMES.test(k) || entityKey(k) === 'path') || known.isKnown(v)) continue;
    const base = knownPaths.find((p) => Object.values(args).includes(p)) ?? rng.pick(knownPaths);
    const dir = base.slice(0, base.lastIndexOf('/'));
    const names = folderWords(known, dir);
    if (!names.length) return undefined;
    const name = rng.pick(names);
    // A new folder gets no extension; a new file the extension of the file beside it.
    out[k] = `${dir}/${name}${!folder && /\.[a-z0-9]+$/i.test(base) ? base.slice(base.lastIndexOf('.')) : ''}`;
  }
  return out;
}

/**
 * Words of five letters or more in what the files of `dir` say of themselves (their first lines, their headings) that
 * name nothing there yet: names a new entry may take ("bills" beside notes whose heading speaks of bills).
 */
function folderWords(known: Discovery, dir: string): string[] {
  const taken = new Set((known.keyValues.get('path') ?? []).map((p) => String(p).slice(String(p).lastIndexOf('/') + 1).replace(/\.[^.]*$/, '').toLowerCase()));
  const words = new Set<string>();
  for (const [p, read] of known.contentOf) {
    if (p.slice(0, p.lastIndexOf('/')) !== dir || known.folders.has(p)) continue;
    const lines = read.text.split('\n').filter((l) => l.trim());
    const told = [...lines.slice(0, 2), ...lines.filter((l) => /^#/.test(l))].join(' ').toLowerCase();
    for (const w of told.match(/\b[a-z]{5,12}\b/g) ?? []) if (!taken.has(w)) words.add(w);
  }
  return [...words].sort();
}