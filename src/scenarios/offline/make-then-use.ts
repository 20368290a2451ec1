/** Task shape make → use: a write that creates something, then a tool that reads or uses it. */
import type { ToolInfo } from '../../mcp/index.js';
import type { Discovery } from './discovery.js';
import type { Generation } from './generation.js';
import { replayOnIsolated } from './replay.js';
import { stateCheckOf, stateReaders, writeEvidence } from './state-checks.js';
import { writeSentence } from './phrasing.js';
import type { Drawn } from './types.js';
import { stringLeaves } from './values.js';
import { madeBy, writeArgs } from './write.js';

/**
 * Make → use: a write that creates something new (an entity), then a tool that uses it — a reader that shows it
 * (open_nodes, search_nodes, read_graph) or a write that refers to it (add_observations). On an empty server this
 * is how the readers, and the writes that need something there, get tasks. `forced`: the tool that uses it;
 * `maker`: the write that makes it.
 */
export async function makeThenUse(g: Generation, known: Discovery, forced: ToolInfo, maker: ToolInfo): Promise<Drawn> {
  const open = g.opts.isolatedServer;
  // A media reader shows nothing a write makes here: it reads images and audio, and discovery saw none.
  if (!open || known.missingReason(forced)) return undefined;
  const makeArgs = writeArgs(g, known, maker);
  if (!makeArgs) return undefined;
  const made = madeBy(known, makeArgs);
  const madeValues = [...made.values()].flat();
  if (!madeValues.length) return undefined;
  const isFolder = (p: string) => known.folders.has(p);
  const making = writeSentence(maker, makeArgs, isFolder);
  if (!making) return undefined;
  const first = g.render('write', { change: making.subject });
  const makeCall = { kind: 'tool_called' as const, tool: maker.name, args: makeArgs };
  if (forced.annotations.readOnlyHint === true) {
    // The reader is asked for what was made: it must show it after the write, and an untouched server must not.
    const readers = stateReaders([forced], madeValues);
    if (!readers.length) return undefined;
    const reader = g.rng.pick(readers);
    const evidence = writeEvidence(makeArgs, known.isKnown);
    const replayed = await replayOnIsolated(open, [{ tool: maker.name, args: makeArgs }], [reader], g.callTimeoutMs);
    if ('failed' in replayed) return 'unverifiable';
    const state = stateCheckOf([reader], replayed, evidence);
    if (!state) {
      g.note(forced.name, 'replay_failed');
      return 'unverifiable';
    }
    // The reader is named by what it is asked about ("Nora Lindqvist"); a reader that takes nothing (the whole
    // graph) by the first thing made, since "it" after a write that made several reads as nothing in particular.
    const shown = stringLeaves(reader.args)[0] ?? madeValues[0];
    return {
      task: `${first} ${g.render('thenRead', { what: `"${shown}"` })}`,
      difficulty: 3,
      checks: [makeCall, { kind: 'tool_called', tool: forced.name, args: reader.args }, state],
      verified: true,
    };
  }
  const useArgs = writeArgs(g, known, forced, makeArgs);
  if (!useArgs || !stringLeaves(useArgs).some((v) => madeValues.includes(v))) return undefined;
  const knownOrMade = (v: string) => known.isKnown(v) || madeValues.includes(v);
  const evidence = writeEvidence(useArgs, knownOrMade);
  const readers = stateReaders(g.usableTools(), evidence.readerValues);
  if (!readers.length) return undefined;
  const replayed = await replayOnIsolated(open, [{ tool: maker.name, args: makeArgs }, { tool: forced.name, args: useArgs }], readers, g.callTimeoutMs);
  if ('failed' in replayed) {
    if (replayed.failed === forced.name) g.note(forced.name, 'calls_failed');
    return 'unverifiable';
  }
  // What only the second write shows (its new values): the first alone would not pass it.
  const state = stateCheckOf(readers, replayed, { ...evidence, values: [] });
  if (!state || state.kind !== 'state_contains') {
    g.note(forced.name, 'replay_failed');
    return 'unverifiable';
  }
  const using = writeSentence(forced, useArgs, isFolder);
  if (!using) return undefined;
  return {
    task: `${first} ${g.render('thenWrite', { change: using.subject })}`,
    difficulty: 3,
    checks: [makeCall, { kind: 'tool_called', tool: forced.name, args: useArgs }, state],
    verified: true,
  };
}
