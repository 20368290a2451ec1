/**
 * Training an example game (tic-tac-toe.ts, higher-lower.ts) through the library, scored on a fixed set of
 * evaluation games before and after: what `npm run example -- tic-tac-toe|higher-lower` runs (examples/run.ts)
 * and what scripts/measure-games.ts measures for docs/library.md.
 */
import { gatherTrajectoryGroups, TrainableModel, type Backend, type TrainResult, type TrajectoryInput } from '../src/index.js';
import type { PlayOptions } from './tic-tac-toe.js';

/** One game played by the model: its recorded trajectory and its reward. */
export type PlayGame = (model: TrainableModel, opts: PlayOptions) => Promise<{ trajectory: TrajectoryInput; result: { reward: number } }>;

export interface GameTrainingOptions {
  play: PlayGame;
  backend: Backend;
  baseModel: string;
  /** The model's name under the backend's project "games". */
  name: string;
  /** Seeds the adapter's initial weights, the training games and every sampling seed. */
  seed: number;
  steps: number;
  /** Groups (distinct games) per step. */
  groups: number;
  /** Games per group (attempts at the same game). */
  perGroup: number;
  lr: number;
  /** Evaluation games played before and after training. */
  evalGames: number;
  /** Each step's result as it completes (`index` counts from 1). */
  onStep?: (result: TrainResult, index: number) => void;
  /** The evaluation's mean reward, before and after training, as each is known. */
  onEvaluated?: (when: 'before' | 'after', meanReward: number) => void;
}

/** The mean reward of `games` fixed evaluation games (seeds no training game uses: 10^6 + i). */
export async function evaluateGame(model: TrainableModel, play: PlayGame, games: number, seed: number): Promise<number> {
  const played = await Promise.all(
    Array.from({ length: games }, (_, i) => play(model, { gameSeed: 1_000_000 + i, samplingSeed: seed * 1_000_000 + i * 10 })),
  );
  return played.reduce((a, g) => a + g.result.reward, 0) / played.length;
}

/** Registers a fresh model, evaluates it, trains `steps` steps of GRPO on LoRA (rank 8, alpha 16), evaluates again. */
export async function trainGame(o: GameTrainingOptions): Promise<{ before: number; after: number; results: TrainResult[] }> {
  const model = new TrainableModel({ project: 'games', name: o.name, baseModel: o.baseModel, lora: { rank: 8, alpha: 16, seed: o.seed } });
  await model.register(o.backend);
  const before = await evaluateGame(model, o.play, o.evalGames, o.seed);
  o.onEvaluated?.('before', before);
  const results: TrainResult[] = [];
  for (let s = 0; s < o.steps; s++) {
    // Training games: seeds 1 … 10^5, a different run of them for each step.
    const items = Array.from({ length: o.groups }, (_, g) => 1 + ((o.seed * 7919 + s * o.groups + g) % 100_000));
    const groups = await gatherTrajectoryGroups(
      items,
      async (gameSeed, ctx) => (await o.play(model, { gameSeed, samplingSeed: o.seed * 100_000 + s * 1000 + ctx.item * 10 + ctx.attempt * 100 })).trajectory,
      { perGroup: o.perGroup },
    );
    const r = await model.train(groups, { lr: o.lr });
    results.push(r);
    o.onStep?.(r, s + 1);
  }
  const after = await evaluateGame(model, o.play, o.evalGames, o.seed);
  o.onEvaluated?.('after', after);
  return { before, after, results };
}
