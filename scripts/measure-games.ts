/**
 * Measures what training through the library does to the example games (examples/tic-tac-toe.ts,
 * examples/higher-lower.ts) on the bundled tiny model: the mean reward of a fixed set of evaluation games before
 * training and after N steps, for each seed (the seed sets the adapter's initial weights and every sampling seed).
 *
 *   node --import tsx scripts/measure-games.ts [--game tic-tac-toe|higher-lower] [--steps 8] [--seeds 1,2,3] [--lr 2e-3]
 *     [--backend local|remote]
 *
 * `--backend remote` trains through `mcprl backend`, a process of its own started here (a free port of 127.0.0.1, a
 * temporary folder), with a RemoteBackend over HTTP, as an application on another machine would; `local` (the
 * default) through a LocalBackend in this process. Decoding is batch-invariant and every sampling seed is fixed, so
 * both give the same figures.
 *
 * Prints one JSON line per seed and a summary line. Not a test: it takes minutes, and its figures are reported.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { playHigherLower } from '../examples/higher-lower.js';
import { playGame as playTicTacToe } from '../examples/tic-tac-toe.js';
import { trainGame } from '../examples/games.js';
import { LocalBackend, RemoteBackend, type Backend } from '../src/index.js';
import { forkServer, type ForkedServer } from './fork-cli.js';

const { values } = parseArgs({
  options: {
    game: { type: 'string', default: 'tic-tac-toe' },
    steps: { type: 'string', default: '8' },
    seeds: { type: 'string', default: '1,2,3' },
    lr: { type: 'string', default: '2e-3' },
    groups: { type: 'string', default: '8' },
    'per-group': { type: 'string', default: '8' },
    'eval-games': { type: 'string', default: '64' },
    backend: { type: 'string', default: 'local' },
  },
});
const steps = Number(values.steps);
const lr = Number(values.lr);
const groupsPerStep = Number(values.groups);
const perGroup = Number(values['per-group']);
const evalGames = Number(values['eval-games']);
const GAMES = { 'tic-tac-toe': playTicTacToe, 'higher-lower': playHigherLower };
if (!(values.game in GAMES)) throw new Error(`--game: one of ${Object.keys(GAMES).join(', ')}`);
const playGame = GAMES[values.game as keyof typeof GAMES];
if (values.backend !== 'local' && values.backend !== 'remote') throw new Error('--backend: local or remote');
// The first bundled tiny model, the one the games' figures in docs/library.md were measured on (test/backend-helpers.ts).
const MODEL = join(import.meta.dirname, '..', 'fixtures', 'models', 'tiny-bookshop-v1');

const rows: { seed: number; before: number; after: number; steps: number }[] = [];
for (const seed of values.seeds.split(',').map(Number)) {
  const dir = await mkdtemp(join(tmpdir(), 'mcprl-measure-'));
  let server: ForkedServer | null = null;
  let backend: Backend;
  if (values.backend === 'remote') {
    server = await forkServer(['backend', '--dir', dir, '--port', '0', '--quiet']);
    backend = new RemoteBackend(server.url);
  } else backend = new LocalBackend({ dir });
  try {
    const { before, after } = await trainGame({
      play: playGame, backend, baseModel: MODEL, name: `${values.game}-${seed}`, seed, steps, groups: groupsPerStep, perGroup, lr, evalGames,
      onStep: (r) => console.error(JSON.stringify({ seed, step: r.step, reward: r.reward, trained: r.trained, loss: r.loss, droppedGroups: r.droppedGroups })),
    });
    rows.push({ seed, before, after, steps });
    console.log(JSON.stringify({ game: values.game, backend: values.backend, seed, steps, before, after }));
  } finally {
    await backend.close();
    await server?.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
console.log(JSON.stringify({ summary: true, game: values.game, backend: values.backend, steps, lr, meanBefore: mean(rows.map((r) => r.before)), meanAfter: mean(rows.map((r) => r.after)) }));
