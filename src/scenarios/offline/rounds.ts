/**
 * The rounds in which candidates are drawn: each allowed tool on its own first, then make → use for the tools still
 * without a scenario, then task shapes at random until the count or the attempts run out.
 */
import { scenariosPerTool } from '../coverage.js';
import { chain } from './chain.js';
import type { Discovery } from './discovery.js';
import { findThenAct } from './find-then-act.js';
import { flow } from './flow.js';
import type { Generation } from './generation.js';
import type { Keeper } from './keep.js';
import { lookup } from './lookup.js';
import { makeThenUse } from './make-then-use.js';
import type { Drawn } from './types.js';
import { write } from './write.js';

/** Candidates each allowed tool gets in the first round, before shapes are drawn at random: until one is kept. */
const FIRST_ROUND_TRIES = 3;

/** Candidates drawn so far, against the generation's bound. */
export interface Attempts {
  n: number;
}

/**
 * First round: every allowed tool gets a few candidates of its own (until one is kept), so that which tools are
 * covered does not hang on the seed's draws.
 */
export async function eachToolFirst(g: Generation, known: Discovery, keeper: Keeper, attempts: Attempts): Promise<void> {
  for (const tool of [...g.tools, ...g.writeTools]) {
    for (let i = 0; i < FIRST_ROUND_TRIES && keeper.scenarios.length < g.count && attempts.n < g.maxAttempts && !g.disabled.has(tool.name); i++) {
      attempts.n++;
      if (await keeper.consider(tool.annotations.readOnlyHint === true ? await lookup(g, known, tool) : await write(g, known, tool))) break;
    }
  }
}

/**
 * Tools the first round left without a scenario (readers of an empty graph, writes that need something there): a
 * task that makes something first, then uses it. Each write that makes something new (not destructive) is tried as
 * the maker in turn.
 */
export async function makeForUncovered(g: Generation, known: Discovery, keeper: Keeper, attempts: Attempts): Promise<void> {
  const covered = () => scenariosPerTool(keeper.scenarios);
  const makers = g.writeTools.filter((t) => t.annotations.destructiveHint === false);
  for (const tool of [...g.tools, ...g.writeTools]) {
    for (let i = 0; i < FIRST_ROUND_TRIES * makers.length && keeper.scenarios.length < g.count && attempts.n < g.maxAttempts && !g.disabled.has(tool.name) && !covered().has(tool.name); i++) {
      const maker = makers[i % makers.length];
      if (maker.name === tool.name) continue;
      attempts.n++;
      await keeper.consider(await makeThenUse(g, known, tool, maker));
    }
  }
}

/** Then task shapes drawn at random, by weight, until enough are kept or the attempts run out. */
export async function randomShapes(g: Generation, known: Discovery, keeper: Keeper, attempts: Attempts): Promise<void> {
  const shapes: [number, () => Promise<Drawn>][] = g.writeTools.length
    ? [[0.25, () => lookup(g, known)], [0.2, () => chain(g, known)], [0.1, () => flow(g, known)], [0.25, () => write(g, known)], [0.2, () => findThenAct(g, known)]]
    : [[0.35, () => lookup(g, known)], [0.3, () => chain(g, known)], [0.15, () => flow(g, known)], [0.2, () => findThenAct(g, known)]];
  while (keeper.scenarios.length < g.count && attempts.n < g.maxAttempts && g.usableTools().length) {
    attempts.n++;
    let r = g.rng.next();
    let shape = shapes[0][1];
    for (const [w, fn] of shapes) {
      if (r < w) {
        shape = fn;
        break;
      }
      r -= w;
    }
    await keeper.consider(await shape());
  }
}
