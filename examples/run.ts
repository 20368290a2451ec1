/**
 * Runs one example with printed progress (a line per training step) and a final line of figures:
 *
 *   npm run example -- quickstart|tic-tac-toe|higher-lower|langgraph [options]
 *
 *   --model DIR       the base model, a Hugging Face model folder (default: the first bundled tiny model,
 *                     fixtures/models/tiny-bookshop-v1, on which docs/library.md's figures were measured)
 *   --steps N         training steps
 *   --groups N        groups per step (games; langgraph, tic-tac-toe, higher-lower)
 *   --per-group N     attempts per group (langgraph, tic-tac-toe, higher-lower)
 *   --lr X            learning rate (langgraph, tic-tac-toe, higher-lower)
 *   --eval-games N    evaluation games scored before and after training (tic-tac-toe, higher-lower)
 *   --seed N          the adapter's initial weights and every sampling seed (tic-tac-toe, higher-lower)
 *   --dir DIR         keep the backend's folder (checkpoints, train-results.jsonl) there; a second run on the same
 *                     folder resumes from its newest checkpoint. Default: a temporary folder, removed at the end.
 *
 * The defaults are the settings of docs/library.md (the games: 10 steps of 8 groups × 8 games, lr 3e-3, 64
 * evaluation games, seed 1). The quickstart's own settings (tasks, lr, group size) are in examples/quickstart.ts.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { LocalBackend, type TrainResult } from '../src/index.js';
import { trainGame } from './games.js';
import { playHigherLower } from './higher-lower.js';
import { trainLangGraph } from './langgraph.js';
import { quickstart } from './quickstart.js';
import { playGame as playTicTacToe } from './tic-tac-toe.js';

const count = z.coerce.number().int().positive();
const rate = z.coerce.number().positive();
/** The games' options: docs/library.md's measured settings by default. */
const GameOptionsSchema = z.object({
  steps: count.default(10), groups: count.default(8), perGroup: count.default(8), lr: rate.default(3e-3), evalGames: count.default(64), seed: count.default(1),
}).strict();
/** Each example's options with their defaults; an option an example does not list is refused for it. */
const EXAMPLES = {
  quickstart: z.object({ steps: count.default(4) }).strict(),
  'tic-tac-toe': GameOptionsSchema,
  'higher-lower': GameOptionsSchema,
  langgraph: z.object({ steps: count.default(4), groups: count.default(4), perGroup: count.default(4), lr: rate.default(2e-3) }).strict(),
};
type ExampleName = keyof typeof EXAMPLES;

const OPTION_FLAGS = { steps: 'steps', groups: 'groups', 'per-group': 'perGroup', lr: 'lr', 'eval-games': 'evalGames', seed: 'seed' } as const;
function fail(message: string): never {
  console.error(`example: ${message}`);
  process.exit(2);
}

function args() {
  try {
    return parseArgs({
      allowPositionals: true,
      options: {
        model: { type: 'string' },
        dir: { type: 'string' },
        steps: { type: 'string' },
        groups: { type: 'string' },
        'per-group': { type: 'string' },
        lr: { type: 'string' },
        'eval-games': { type: 'string' },
        seed: { type: 'string' },
      },
    });
  } catch (e) {
    return fail((e as Error).message);
  }
}
const { values, positionals } = args();

const name = positionals[0];
if (positionals.length !== 1 || !(name in EXAMPLES)) fail(`name one example: ${Object.keys(EXAMPLES).join(', ')} (got ${positionals.join(' ') || 'none'})`);
const example = name as ExampleName;
const given = Object.fromEntries(
  Object.entries(OPTION_FLAGS).flatMap(([flag, key]) => (values[flag as keyof typeof OPTION_FLAGS] === undefined ? [] : [[key, values[flag as keyof typeof OPTION_FLAGS]]])),
);
const parsed = EXAMPLES[example].safeParse(given);
if (!parsed.success) {
  const issue = parsed.error.issues[0];
  const key = issue.code === 'unrecognized_keys' ? issue.keys[0] : String(issue.path[0]);
  const flag = Object.entries(OPTION_FLAGS).find(([, k]) => k === key)?.[0] ?? key;
  fail(issue.code === 'unrecognized_keys' ? `--${flag} does not apply to ${example}` : `--${flag}: ${issue.message}`);
}
const opts = parsed.data as { steps: number; groups?: number; perGroup?: number; lr?: number; evalGames?: number; seed?: number };
const baseModel = values.model ?? join(import.meta.dirname, '..', 'fixtures', 'models', 'tiny-bookshop-v1');

const started = Date.now();
const seconds = () => `${((Date.now() - started) / 1000).toFixed(0)} s`;
const r3 = (x: number) => x.toFixed(3);
/** One line per step: its mean reward, and what the step did. */
function printStep(r: TrainResult, index: number): void {
  const what = r.trained
    ? `trained on ${r.groups - r.droppedGroups} of ${r.groups} groups, model at step ${r.step}`
    : `nothing trained (all ${r.groups} groups' rewards alike), model at step ${r.step}`;
  console.log(`step ${index}/${opts.steps}: mean reward ${r3(r.reward)} over ${r.trajectories} attempts, ${what} (${seconds()})`);
}
/** The final line's part shared by the examples that only train: first and last step's mean reward, steps trained. */
function trainedFigures(results: TrainResult[]): string {
  const first = results[0];
  const last = results[results.length - 1];
  return `mean reward ${r3(first.reward)} at step 1, ${r3(last.reward)} at step ${results.length}; ${results.filter((r) => r.trained).length} of ${results.length} steps trained`;
}

const dir = values.dir ?? (await mkdtemp(join(tmpdir(), `mcprl-example-${example}-`)));
console.log(`${example}: ${opts.steps} steps on ${basename(baseModel)}, the backend's folder ${dir}`);
try {
  if (example === 'quickstart') {
    let step = 0;
    const results = await quickstart({ dir, baseModel, steps: opts.steps, onStep: (r) => printStep(r, ++step) });
    console.log(`quickstart: ${trainedFigures(results)}; ${seconds()}`);
  } else if (example === 'langgraph') {
    const { results } = await trainLangGraph({ dir, baseModel, steps: opts.steps, games: opts.groups!, perGroup: opts.perGroup!, lr: opts.lr!, onStep: printStep });
    console.log(`langgraph: ${trainedFigures(results)}; ${seconds()}`);
  } else {
    const play = example === 'tic-tac-toe' ? playTicTacToe : playHigherLower;
    const backend = new LocalBackend({ dir });
    try {
      const { before, after, results } = await trainGame({
        play, backend, baseModel, name: example, seed: opts.seed!, steps: opts.steps, groups: opts.groups!, perGroup: opts.perGroup!, lr: opts.lr!,
        evalGames: opts.evalGames!, onStep: printStep,
        onEvaluated: (when, reward) => console.log(`${when} training: mean reward ${r3(reward)} over ${opts.evalGames} evaluation games (${seconds()})`),
      });
      console.log(`${example}: mean reward of ${opts.evalGames} evaluation games ${r3(before)} before, ${r3(after)} after ${opts.steps} steps ` +
        `(${results.filter((r) => r.trained).length} trained; seed ${opts.seed}); ${seconds()}`);
    } finally {
      await backend.close();
    }
  }
} finally {
  if (values.dir === undefined) await rm(dir, { recursive: true, force: true });
}
