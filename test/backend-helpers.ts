/**
 * Shared by the library's tests: the tiny model, games of the tic-tac-toe example gathered into groups, and a
 * probe completion that tells which adapter answered and with which logprobs.
 */
import { join } from 'node:path';
import { playGame, type PlayOptions } from '../examples/tic-tac-toe.js';
import { gatherTrajectoryGroups, type TrainableModel, type TrajectoryGroup, type TrajectoryInput } from '../src/index.js';
import { REPO_ROOT } from './helpers/servers.js';

/**
 * The games' model: the first bundled tiny model (fixtures/models/tiny-bookshop-v1), whose warm-up left it replying
 * with a digit often enough that games differ and train. The current bundled model was warmed up to answer
 * bookshop tasks at once (docs/tiny-model.md), and every game of a group plays alike on it.
 */
export const TINY_MODEL = process.env.MCPRL_TEST_GAMES_MODEL ?? join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop-v1');

type Game = (model: TrainableModel, opts: PlayOptions) => Promise<{ trajectory: TrajectoryInput }>;

/**
 * Games for one step: `groups` game seeds, 4 attempts each, every sampling seeded (the same call, the same
 * games). Default game: tic-tac-toe.
 */
export function gatherGames(model: TrainableModel, round: number, groups = 6, play: Game = playGame): Promise<TrajectoryGroup[]> {
  const seeds = Array.from({ length: groups }, (_, g) => 100 * round + g + 1);
  return gatherTrajectoryGroups(
    seeds,
    async (gameSeed, ctx) => (await play(model, { gameSeed, samplingSeed: 10_000 * round + 100 * ctx.item + 10 * ctx.attempt })).trajectory,
    { perGroup: 4, concurrency: 4 },
  );
}

export interface Probe {
  /** The adapter that answered (the server's `mcprl_adapter`). */
  adapter: string | null;
  tokenIds: number[];
  logprobs: number[];
}

/** A greedy completion of one fixed prompt through the model's OpenAI endpoint. */
export async function probe(model: TrainableModel): Promise<Probe> {
  const completion = (await model.openai({ maxRetries: 0 }).chat.completions.create({
    model: model.inferenceName,
    messages: [{ role: 'user', content: 'You play X on cells 1-9. Board: . . .|. . .|. . .. Free cells: 1, 2, 3, 4, 5, 6, 7, 8, 9. Reply with one free cell number.' }],
    temperature: 0,
    max_tokens: 8,
    logprobs: true,
  })) as unknown as { mcprl_adapter: string | null; choices: { mcprl_token_ids: number[]; logprobs: { content: { logprob: number }[] } }[] };
  const c = completion.choices[0];
  return { adapter: completion.mcprl_adapter, tokenIds: c.mcprl_token_ids, logprobs: c.logprobs.content.map((t) => t.logprob) };
}

/** True when two probes sampled the same tokens with the same logprobs (to 1e-5): the same weights answered. */
export function sameAnswer(a: Probe, b: Probe): boolean {
  return a.tokenIds.length === b.tokenIds.length && a.tokenIds.every((t, i) => t === b.tokenIds[i] && Math.abs(a.logprobs[i] - b.logprobs[i]) < 1e-5);
}
