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
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { execFile, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listeningUrl, runCli } from '../helpers/cli.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from '../helpers/servers.js';
import { bookshopScenarios, ENTRY, mcprl } from './cli.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const KILL_AT = path.join(REPO_ROOT, 'test', 'faults', 'kill-at.ts');
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

const trainArgs = (run: string) => ['train', '--model', MODEL, '--scenarios', scenarios, '--run', run, '--runs-dir', runs, '--quiet',
  '--rollout-url', url, '--adapter-dir', path.join(work, 'adapters'), ...SETTINGS, ...FIXTURE];

/** `mcprl train` with kill-at.ts preloaded; resolves with the signal that ended it. */
function trainKilledAt(run: string, at: string): Promise<{ signal: string | null; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', '--import', KILL_AT, ENTRY, ...trainArgs(run)], { cwd: REPO_ROOT, timeout: 280_000, env: { ...process.env, MCPRL_KILL_AT: at } },
      (err, _stdout, stderr) => resolve({ signal: err?.signal ?? null, stderr }));
  });
}

const jsonl = async (file: string) => (await readFile(file, 'utf8')).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l) as Record<string, any>);
/** A metrics row without its timing figures (wall_s, tokens_per_s), which a rewrite would not change anyway. */
const row = ({ wall_s: _w, tokens_per_s: _t, ...m }: Record<string, unknown>) => m;

/** Files a write cut short would leave: temporaries and swapped-out folders (src/util/atomic.ts). */
async function leftovers(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) if (/^\..+\.(tmp|old)$/.test(e.name)) out.push(path.join(e.parentPath, e.name));
  return out;
}

describe('kill -9 of the asynchronous loop (--max-staleness 1)', () => {
  // Step 2 has trained, its checkpoint is filled but not swapped in: step 1 is the last committed step, and step 3's
  // groups are being gathered ahead (its gather may start once adapter 1 is published, which happened before step
  // 2 trained, and starts as soon as step 2's own gather has ended).
  it('kill -9 mid-step 2, step 3 gathered ahead (before:checkpoints/step-0002), then --resume', async () => {
    const run = 'mid-step';
    const dir = path.join(runs, run);
    const killed = await trainKilledAt(run, 'before:checkpoints/step-0002');
    expect(killed.signal, killed.stderr).toBe('SIGKILL');

    const state = JSON.parse(await readFile(path.join(dir, 'state.json'), 'utf8'));
    expect(state.step).toBe(1);
    const committed = (await jsonl(path.join(dir, 'metrics.jsonl'))).map(row);
    expect(committed.map((m) => m.step)).toEqual([0, 1]);
    const step1 = await readFile(path.join(dir, 'trajectories', 'step-0001.jsonl'), 'utf8');
    // Step 3's gather had started: its progress events are in the run's progress log (never a guess from timing).
    const progress = await jsonl(path.join(dir, 'progress.jsonl'));
    expect(progress.some((e) => e.phase === 'gather' && e.step === 3), 'step 3 was not being gathered ahead at the kill').toBe(true);

    // The servers are not part of the run's settings (config.json): the resumed run is given them again.
    const r = await mcprl(['train', '--run', run, '--runs-dir', runs, '--resume', '--quiet', '--rollout-url', url, '--adapter-dir', path.join(work, 'adapters'), ...FIXTURE]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(await readFile(path.join(dir, 'state.json'), 'utf8'))).toMatchObject({ step: 3, stopped: 'max_steps' });

    // No committed step lost or changed; every step once.
    const metrics = (await jsonl(path.join(dir, 'metrics.jsonl'))).map(row);
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
    fault('kill -9 of the asynchronous loop mid-step, a step gathered ahead', 'resumes from the last committed step; the groups gathered ahead are gathered again',
      'committed steps unchanged, every step once, the resumed step sampled by the resumed adapter, one optimiser update per step');
  }, 600_000);
});
