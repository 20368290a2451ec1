/**
 * `npm run demo`: the main job, offline, on this machine's CPU. The bundled tiny model learns the bookshop
 * fixture server's tools by GRPO with execution-checked rewards; validation scenarios are held out (other
 * entities, other phrasings). Prints validation and test success before and after, and where the run, its
 * report and the exported adapter are. With `--seeds 1,2,3` it trains once per seed, one after the other, and
 * prints the table the README shows (per seed and the mean; see demo-table.ts).
 *
 *   npm run demo [-- --seed 2 --max-steps 12 --run NAME] [--model DIR --scenarios DIR]
 *   npm run demo -- --seeds 1,2,3
 *   npm run demo -- --seeds 1,2,3 -- --lr 1e-3     (options after a second -- go to mcprl train; a later option wins)
 *   npm run demo -- --split [--max-staleness 1]
 *   npm run demo -- --device cpu|cuda|auto    (where the engine runs: mcprl train's and serve's --device)
 *   npm run demo -- --target memory|filesystem [--seed 1 --max-steps 10 --count 48]
 *
 * `--target memory` and `--target filesystem` run the same pipeline on a published server from node_modules that
 * mcprl did not write (scripts/demo-targets.ts): the demo writes the data the server starts from, `mcprl scenarios
 * --offline` makes a train/validation/test set from it (the test set is never used to select a checkpoint), and
 * `mcprl train` trains on it with every rollout on a server of its own in a `{sandbox}` copied from that data
 * (--isolate --sandbox-from), which must come out unchanged. The bundled model only knows the bookshop, so these
 * show the pipeline running on another server, not learning. Every target prints its test success per kind of
 * task (tool shape × difficulty), untrained → the selected checkpoint.
 *
 * With `--split` the rollouts run on `mcprl serve` as a process of its own (the bundled model on a free port of
 * 127.0.0.1), and training drives it with `mcprl train --rollout-url … --adapter-dir …` (a temporary folder both
 * read), as a deployment with vLLM would; the server is stopped and the folder removed at the end. Each seed
 * prints its wall time, so the two ways can be compared. `--max-staleness N` (with `--split`) makes the rollouts
 * asynchronous: the server gathers the next step while the trainer trains (docs/serving.md).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { isDeepStrictEqual } from 'node:util';
import { tmpdir } from 'node:os';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { main } from '../src/cli/main.js';
import { DeviceSchema } from '../src/engine/device.js';
import { formatKindTable, formatSeedTable, kindTable, meanKindTable, seedRow, type KindTable, type SeedRow } from './demo-table.js';
import { DEMO_TARGETS, folderDigest, publishedTarget, writeTargetInputs, type DemoTargetName } from './demo-targets.js';
import { forkServer } from './fork-cli.js';

const ROOT = resolve(import.meta.dirname, '..');
// Options after a `--` are mcprl train's own, appended to the demo's settings (a later option wins).
const cut = process.argv.indexOf('--', 2);
const trainExtra = cut >= 0 ? process.argv.slice(cut + 1) : [];
const { values } = parseArgs({
  args: cut >= 0 ? process.argv.slice(2, cut) : process.argv.slice(2),
  options: {
    seed: { type: 'string', default: '1' },
    seeds: { type: 'string' },
    // The server trained on: the bookshop fixture, or a published server (scripts/demo-targets.ts).
    target: { type: 'string', default: 'bookshop' },
    // Default per target: 30 for the bookshop, PUBLISHED.maxSteps for the others.
    'max-steps': { type: 'string' },
    run: { type: 'string' },
    split: { type: 'boolean', default: false },
    // Where the engine runs (mcprl train's and serve's --device: src/engine/device.ts); default: theirs (auto).
    device: { type: 'string' },
    'max-staleness': { type: 'string' },
    'runs-dir': { type: 'string', default: join(ROOT, 'runs') },
    // A rebuilt tiny model and its scenario sets, to measure them before they replace the bundled ones.
    model: { type: 'string', default: join(ROOT, 'fixtures', 'models', 'tiny-bookshop') },
    // Default: the bundled bookshop set; for a published target, a set `mcprl scenarios --offline` makes for it.
    scenarios: { type: 'string' },
    // Scenarios asked of `mcprl scenarios` for a published target (default: PUBLISHED's).
    count: { type: 'string' },
  },
});

/**
 * The published targets' settings, smaller than the bookshop's so that a demo (scenarios, 10 steps, validation and
 * test) stays within minutes on two cores: every rollout there starts a server process of its own (--isolate).
 */
const PUBLISHED = {
  maxSteps: '10',
  // 48 tasks asked: a quarter for validation, a quarter for test (split by overlap, so the counts vary a little).
  count: '48',
  scenarioArgs: ['--seed', '1', '--val-fraction', '1/4', '--test-fraction', '1/4'],
  trainArgs: ['--groups-per-step', '4', '--rollouts-per-group', '8', '--resample-rounds', '1', '--concurrency', '32'],
};

if (!(DEMO_TARGETS as readonly string[]).includes(values.target!)) {
  console.error(`--target ${values.target}: expected one of ${DEMO_TARGETS.join(', ')}`);
  process.exit(1);
}
const targetName = values.target as DemoTargetName;
const published = targetName === 'bookshop' ? undefined : publishedTarget(targetName);
const maxSteps = values['max-steps'] ?? (published ? PUBLISHED.maxSteps : '30');
if (values.count !== undefined && (!published || values.scenarios !== undefined)) {
  console.error('--count is the number of scenarios the demo generates for a published target (--target memory|filesystem, without --scenarios)');
  process.exit(1);
}

const device = values.device !== undefined ? DeviceSchema.safeParse(values.device) : undefined;
if (device && !device.success) {
  console.error(`--device ${values.device}: expected one of ${DeviceSchema.unwrap().options.join(', ')}`);
  process.exit(1);
}
const deviceArgs = device ? ['--device', device.data!] : [];
const model = values.model!;
if (!existsSync(join(model, 'model.safetensors'))) {
  console.error(`the bundled tiny model is missing at ${model}; rebuild it with: node --import tsx scripts/tiny-model/build.ts`);
  process.exit(1);
}
// The fixture server: compiled JavaScript when `npm ci` has built dist/, else its TypeScript source via tsx.
const compiled = join(ROOT, 'dist', 'fixtures', 'server', 'main.js');
const server = existsSync(compiled) ? [process.execPath, compiled] : [process.execPath, '--import', 'tsx', join(ROOT, 'fixtures', 'server', 'main.ts')];
if (values['max-staleness'] !== undefined && !values.split) {
  console.error('--max-staleness needs --split: asynchronous rollouts run on a rollout server');
  process.exit(1);
}
const seeds = (values.seeds ?? values.seed!).split(',').map((x) => x.trim()).filter(Boolean);
if (seeds.length > 1 && values.run) {
  console.error('--run names one run; with --seeds each seed gets its own run name');
  process.exit(1);
}
const stamp = () => new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
// A published target: its data, its mcp.json and (unless --scenarios names one) its scenario set, made once for every seed.
const inputs = published ? await writeTargetInputs(published, join(values['runs-dir']!, `demo-${published.name}-inputs-${stamp()}`)) : undefined;
const digest = inputs ? await folderDigest(inputs.source) : undefined;
let scenarios = values.scenarios ?? join(ROOT, 'fixtures', 'scenarios', 'bookshop');
if (published && inputs && values.scenarios === undefined) {
  scenarios = join(inputs.source, '..', 'scenarios');
  console.error(`mcprl demo: ${published.label}; data in ${inputs.source}, scenarios → ${scenarios}`);
  await main([process.argv[0], 'mcprl', 'scenarios', '--offline', '--out', scenarios, '--count', values.count ?? PUBLISHED.count, ...PUBLISHED.scenarioArgs, ...targetArgs()]);
  if (process.exitCode) process.exit(process.exitCode);
}
const rows: SeedRow[] = [];
const kindTables: KindTable[] = [];
for (const seed of seeds) {
  const run = values.run ?? (published ? `demo-${published.name}-seed${seed}-${stamp()}` : `demo-seed${seed}-${stamp()}`);
  if (published) console.error(`mcprl demo: training ${model} on ${published.name} (seed ${seed}, run ${run}, ${maxSteps} steps)`);
  else console.error(`mcprl demo: training ${model} on the bookshop fixture server (seed ${seed}, run ${run}); this takes a while on two cores (30 steps, 48 validation and 48 test tasks)`);
  const t0 = performance.now();
  if (values.split) await split((rollout) => demo(seed, run, rollout));
  else await demo(seed, run, []);
  if (process.exitCode) process.exit(process.exitCode);
  const wallS = (performance.now() - t0) / 1000;
  console.error(`mcprl demo: seed ${seed} took ${wallS.toFixed(1)} s${values.split ? ' (serve + train as two processes)' : ''}`);
  rows.push(await seedRow(join(values['runs-dir']!, run), wallS));
  const kinds = await kindTable(join(values['runs-dir']!, run));
  if (kinds) console.log(`\nTest success per kind of task (${targetName}, seed ${seed}):\n${formatKindTable(kinds, false)}`);
  if (kinds) kindTables.push(kinds);
  if (inputs && digest) {
    // The sandboxes were copies: the data they were copied from must be byte for byte what the demo wrote.
    if (!isDeepStrictEqual(await folderDigest(inputs.source), digest)) {
      console.error(`mcprl demo: ${inputs.source} changed during the run: a sandbox was not a copy`);
      process.exit(1);
    }
    console.error(`mcprl demo: ${inputs.source} unchanged (${Object.keys(digest).length} files, sha256)`);
  }
}
if (seeds.length > 1) console.log(`\n${formatSeedTable(rows)}`);
if (kindTables.length > 1) console.log(`\nTest success per kind of task (${targetName}, mean of seeds ${seeds.join(', ')}):\n${formatKindTable(meanKindTable(kindTables))}`);

/**
 * Runs `f` with the options that send its rollouts to a `mcprl serve` process started here (the demo's model, a
 * free port), then stops that process and removes the adapter folder, whether `f` succeeded or not.
 */
async function split(f: (rollout: string[]) => Promise<void>): Promise<void> {
  const adapters = await mkdtemp(join(tmpdir(), 'mcprl-demo-adapters-'));
  try {
    const server = await forkServer(['serve', '--model', model, '--port', '0', '--quiet', ...deviceArgs]);
    try {
      console.error(`mcprl demo: rollouts on mcprl serve at ${server.url} (pid ${server.child.pid}), adapters in ${adapters}`);
      await f(['--rollout-url', server.url, '--adapter-dir', adapters, ...(values['max-staleness'] !== undefined ? ['--max-staleness', values['max-staleness']] : [])]);
    } finally {
      await server.stop();
    }
  } finally {
    await rm(adapters, { recursive: true, force: true });
  }
}

/** The options that name the demo's server: the bookshop fixture after `--`, or a published one, sandboxed. */
function targetArgs(): string[] {
  if (!inputs) return ['--', ...server];
  return ['--isolate', '--sandbox-from', inputs.source, '--config', inputs.config];
}

async function demo(seed: string, run: string, rollout: string[]): Promise<void> {
  await main([
    process.argv[0], 'mcprl', 'train',
    '--model', model,
    '--scenarios', scenarios,
    '--reward', 'checks',
    '--run', run,
    '--runs-dir', values['runs-dir']!,
    '--seed', seed,
    '--max-steps', maxSteps,
    // Tuned for the tiny model (seeds 1-3 measured; see docs/benchmarks.md): 8 attempts per scenario give more groups whose
    // rewards differ; sampling above the model's own distribution spreads a group's attempts so that fewer groups
    // score all alike (seed 1: 28 % of groups at temperature 1.2, 38-40 % at 1, 63 % at 0.7 on an earlier model;
    // test gain +41.7 at 1.2, +43.8 and +50.0 at 1); two optimiser steps per batch; 4 turns of at most 128 tokens
    // cut the cost of broken attempts that loop.
    '--rollouts-per-group', '8',
    '--temperature', '1.2',
    '--updates-per-step', '2',
    '--max-turns', '4',
    '--max-tokens', '128',
    '--patience', '8',
    // A whole step's rollouts (8 × 8) in flight at once: the engine decodes them as one batch, faster per token;
    // decoding is batch-invariant, so the figures are those of any other concurrency.
    '--concurrency', '64',
    // Measured on seeds 1-3 against the same settings without them (docs/benchmarks.md): tool calls decoded valid by
    // construction, logprobs at the temperature that sampled, scenarios drawn by pass rate, and groups without
    // signal replaced within the step (up to 2 rounds).
    '--constrain-tool-calls',
    '--train-at-sampling-temperature',
    '--curriculum', 'pass_rate',
    // A scenario whose last group was solved by every attempt, or whose last two groups scored all alike, is drawn
    // only at the curriculum's floor until it scores differently: once the model solves most of its 96 tasks,
    // revisits of scenarios whose last group scored alike were 18 % of the groups and 71 % of them scored all alike
    // again (seeds 1-3); with it 22.5 % of groups scored alike, against 30.0 % (docs/benchmarks.md).
    '--curriculum-retire-after', '2',
    '--resample-rounds', '2',
    ...(published ? PUBLISHED.trainArgs : []),
    ...deviceArgs,
    ...rollout,
    ...trainExtra,
    ...targetArgs(),
  ]);
}
