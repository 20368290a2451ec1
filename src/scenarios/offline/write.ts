/** Task shape write: a change asked for in plain words, replayed on isolated servers and checked by the state it leaves. */
import type { ToolCallOutcome, ToolInfo } from '../../mcp/index.js';
import { synthesizeArgs, type CandidateContext } from '../json-schema-args.js';
import { answerContains } from '../scenario.js';
import { chooseAnswer } from './answer.js';
import { entityKey, fixedCandidates, FOLDER_WORDS, hasKey, NEW_PATH_NAMES, OLD_TEXT_NAMES, REF_NAMES, smallAmounts, uniqueLines, withFixed, withOldText } from './arguments.js';
import type { Discovery } from './discovery.js';
import type { Generation } from './generation.js';
import { asked } from './lookup.js';
import { replayOnIsolated } from './replay.js';
import { stateCheckOf, stateReaders, writeEvidence } from './state-checks.js';
import type { Drawn, OfflineOptions } from './types.js';
import { walkObjects } from './values.js';
import { actionPhrase, isIdName, plainArgs, words } from './wording.js';

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
    if (tool.annotations.destructiveHint === false && !readers.some((r) => Object.keys(r.args).length)) return ownResult(g, open, tool, args, replayed.outputs[0]);
    g.note(tool.name, readers.length ? 'replay_failed' : 'nothing_to_ask');
    return readers.length ? 'unverifiable' : undefined;
  }
  return {
    task: g.render('write', { action: actionPhrase(tool), args: plainArgs(args) }),
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
async function ownResult(g: Generation, open: NonNullable<OfflineOptions['isolatedServer']>, tool: ToolInfo, args: Record<string, unknown>, out: ToolCallOutcome): Promise<Drawn> {
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
  return { ...asked(g, tool, args, answer), verified: true };
}

/**
 * Arguments for a write tool, or undefined (noted) when none can be built. `made`: values a write before it in the
 * same task creates, by entity key ("name" → ["Quill"]): a reference to an entity takes one of those.
 */
export function writeArgs(g: Generation, known: Discovery, tool: ToolInfo, made?: Map<string, string[]>): Record<string, unknown> | undefined {
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
    if (edits && entityKey(ctx.name) === 'path') return [...known.contentOf.keys()].filter((p) => !known.folders.has(p));
    // An amount a person asks for in one change is small, and a large one is likelier refused (stock, limits).
    if ((ctx.schema.type === 'integer' || ctx.schema.type === 'number') && !isIdName(ctx.name)) return smallAmounts(ctx.schema);
    if (REF_NAMES.test(ctx.name)) return (known.keyValues.get('path') ?? []).filter((p) => typeof p === 'string' && /\/[^/]+\.[a-z0-9]+$/i.test(p));
    if (isIdName(ctx.name) || (words(ctx.name).length >= 2 && entityKey(ctx.name))) return known.candidates(tool)(ctx);
    const listed = destructive ? known.listValues.get(ctx.name) : undefined;
    return listed?.length ? listed : destructive ? known.candidates(tool)(ctx) : undefined;
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
  } else args = newPathsBeside(known, args, FOLDER_WORDS.test(words(tool.name).join(' ')));
  return args;
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
 * path, in the same folder, so that it lies where the server may write.
 */
function newPathsBeside(known: Discovery, args: Record<string, unknown>, folder: boolean): Record<string, unknown> {
  const knownPaths = (known.keyValues.get('path') ?? []).filter((p): p is string => typeof p === 'string' && p.includes('/'));
  if (!knownPaths.length) return args;
  const out = { ...args };
  for (const [k, v] of Object.entries(args)) {
    // A destination, or a path no listing showed (a folder to create): a new name in a discovered folder.
    if (typeof v !== 'string' || !(NEW_PATH_NAMES.test(k) || entityKey(k) === 'path') || known.isKnown(v)) continue;
    const base = knownPaths.find((p) => Object.values(args).includes(p)) ?? knownPaths[0];
    const name = v.trim().toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '') || 'new';
    // A new folder gets no extension; a new file the extension of the file beside it.
    out[k] = `${base.slice(0, base.lastIndexOf('/'))}/${name}${!folder && /\.[a-z0-9]+$/i.test(base) ? base.slice(base.lastIndexOf('.')) : ''}`;
  }
  return out;
}
