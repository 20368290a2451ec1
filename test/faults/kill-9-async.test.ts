/**
 * Issue 15: kill -9 of the asynchronous loop (`mcprl train --max-staleness 1 --rollout-url URL`). As in
 * kill-9.test.ts the trainer SIGKILLs itself at an exact point of its crash-safe writes (test/faults/kill-at.ts; no
 * timer decides where), then `mcprl train --resume` finishes the run against the same `mcprl serve`, which outlived
 * the trainer with its adapters still loaded.
 *
 * An asynchronous run is not bit-reproducible (timing decides which adapter samples what), so instead of comparing
 * with an uninterrupted run this checks what must hold whatever the timing: no committed step is lost or changed
 * (its metrics row and trajectories are those written before the kill), no step is trained twice (the final
 * optimiser counts exactly one update per step), the run finishes, and the groups that were gathered ahead
 * and not committed are gathered again: the resumed step's trajectories were all sampled by the adapter the resumed
 * run starts from. (Nothing gathered ahead is kept: it lives in memory until its step commits.)
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listeningUrl, runCli } from '../helpers/cli.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from '../helpers/servers.js';
import { bookshopScenarios, leftovers, mcprl, mcprlKilledAt } from './cli.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const SETTINGS = ['--groups-per-step', '2', '--rollouts-per-group', '4', '--max-turns', '3', '--max-tokens', '48', '--concurrency', '4', '--max-steps', '3', '--eval-every', '3', '--patience', '10', '--max-staleness', '1'];
const FIXTURE = ['--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];
let work: string;
let scenarios: string;
let runs: string;
let server: ChildProcessWithoutNullStreams;
let url: string;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-kill9-async-'));
  scenarios = await bookshopScenarios(path.join(work, 'scen'), 6, 2);
  runs = path.join(work, 'runs');
  server = runCli(['serve', '--model', MODEL, '--port', '0', '--quiet']);
  url = await listeningUrl(server);
});
afterAll(async () => {
  if (server && server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
  if (work) await rm(work, { recursive: true, force: true });
});

const adapters = (run: string) => path.join(work, 'adapters', run);
const trainArgs = (run: string) => ['train', '--model', MODEL, '--scenarios', scenarios, '--run', run, '--runs-dir', runs, '--quiet',
  '--rollout-url', url, '--adapter-dir', adapters(run), ...SETTINGS, ...FIXTURE];

const jsonl = async (file: string) => (await readFile(file, 'utf8')).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l) as Record<string, any>);

describe('kill -9 of the asynchronous loop (--max-staleness 1)', () => {
  // Where the trainer dies, and the step whose gather had started ahead of training by then. Both are certain, not
  // up to timing: a gather starts (and reports its phase) within microtasks of the previous gather's end, once its
  // adapter bound allows it, while the step that follows trains on a worker thread for far longer than that. Step 2
  // may be gathered from the start (adapter 0 + N), step 3 once adapter 1 is published, before step 2 trains. The
  // run's state.json is named with its slash: checkpoints' trainer_state.json end in state.json too.
  const points: [string, string, number][] = [
    ['between steps: step 1 committed, step 2 gathered ahead and not trained', 'after:/state.json#2', 2],
    ['mid-step 2: trained, its checkpoint not swapped in, step 3 gathered ahead', 'before:checkpoints/step-0002', 3],
  ];
  for (const [name, at, ahead] of points) it(`kill -9 ${name} (${at}), then --resume`, async () => {
    const run = at.replace(/[^a-z0-9]+/gi, '-');
    const dir = path.join(runs, run);
    const killed = await mcprlKilledAt(trainArgs(run), at);
    expect(killed.signal, killed.stderr).toBe('SIGKILL');

    const state = JSON.parse(await readFile(path.join(dir, 'state.json'), 'utf8'));
    expect(state.step).toBe(1);
    const committed = await jsonl(path.join(dir, 'metrics.jsonl'));
    expect(committed.map((m) => m.step)).toEqual([0, 1]);
    const step1 = await readFile(path.join(dir, 'trajectories', 'step-0001.jsonl'), 'utf8');
    // The step gathered ahead had started: its progress events are in the run's progress log.
    const progress = await jsonl(path.join(dir, 'progress.jsonl'));
    expect(progress.some((e) => e.phase === 'gather' && e.step === ahead), `step ${ahead} was not being gathered ahead at the kill`).toBe(true);

    // The servers are not part of the run's settings (config.json): the resumed run is given them again.
    const r = await mcprl(['train', '--run', run, '--runs-dir', runs, '--resume', '--quiet', '--rollout-url', url, '--adapter-dir', adapters(run), ...FIXTURE]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(await readFile(path.join(dir, 'state.json'), 'utf8'))).toMatchObject({ step: 3, stopped: 'max_steps' });

    // No committed step lost or changed; every step once.
    const metrics = await jsonl(path.join(dir, 'metrics.jsonl'));
    expect(metrics.map((m) => m.step)).toEqual([0, 1, 2, 3]);
    expect(metrics.slice(0, 2)).toEqual(committed);
    expect(await readFile(path.join(dir, 'trajectories', 'step-0001.jsonl'), 'utf8')).toBe(step1);
    // Step 2 was gathered again, by the adapter the resumed run started from (policy-step-1): nothing sampled before
    // the kill was kept. Step 3 was gathered ahead again within the staleness bound.
    const step2 = (await jsonl(path.join(dir, 'trajectories', 'step-0002.jsonl'))).filter((t) => t.metrics.turns > 0);
    expect(step2.length).toBeGreaterThan(0);
    for (const t of step2) expect(t).toMatchObject({ sampled_by: ['policy-step-1'], policy_step: 1 });
    for (const m of metrics.slice(1)) expect(m.staleness_max).toBeLessThanOrEqual(1);

    // No step trained twice: the final optimiser state counts one update per step of the run (--updates-per-step 1;
    // a step with nothing to train counts too), so a step 2 trained before the kill and again after would make 4.
    expect(metrics.some((m) => m.loss !== undefined), `no step trained: ${JSON.stringify(metrics)}`).toBe(true);
    const trainer = JSON.parse(await readFile(path.join(dir, 'checkpoints', 'step-0003', 'trainer_state.json'), 'utf8'));
    expect(trainer.step).toBe(3);
    expect(existsSync(path.join(dir, 'report.html'))).toBe(true);
    expect(await leftovers(dir)).toEqual([]);
    fault(`kill -9 of the asynchronous loop, ${name}`, 'resumes from the last committed step; the groups gathered ahead are gathered again',
      'committed steps unchanged, every step once, the resumed step sampled by the resumed adapter, one optimiser update per step');
  }, 600_000);
});
