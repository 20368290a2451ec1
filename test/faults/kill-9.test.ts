/**
 * Issue 12: kill -9 mid-step and around the checkpoint commit. A run is killed at exact points of its crash-safe
 * writes (test/faults/kill-at.ts: the process SIGKILLs itself just before or after a given rename, so no timer
 * decides where), then `mcprl train --resume` finishes it. Every point must resume to the same run an uninterrupted
 * one makes: the same metrics, the same final adapter and optimiser state, byte for byte, and no temporaries left.
 * The run is the real CLI on the bundled tiny model and the fixture server, one rollout at a time (so that sampling
 * is reproducible), two steps of which the second trains.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from '../helpers/servers.js';
import { bookshopScenarios, leftovers, mcprl, mcprlKilledAt } from './cli.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const SETTINGS = ['--groups-per-step', '2', '--rollouts-per-group', '4', '--max-turns', '3', '--max-tokens', '64', '--concurrency', '1', '--max-steps', '2', '--eval-every', '1'];
const FIXTURE = ['--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];
let work: string;
let scenarios: string;
let runs: string;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-kill9-'));
  scenarios = await bookshopScenarios(path.join(work, 'scen'), 4, 2);
  runs = path.join(work, 'runs');
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

const trainArgs = (run: string) => ['train', '--model', MODEL, '--scenarios', scenarios, '--run', run, '--runs-dir', runs, '--quiet', ...SETTINGS, ...FIXTURE];


/**
 * What must come out the same: metrics without the timing figures and the prefix cache's counters (what the
 * engine's cache held depends on the process — a resumed one starts empty — while the results do not), the final
 * checkpoint's bytes, the state.
 */
async function outcome(run: string) {
  const dir = path.join(runs, run);
  const metrics = (await readFile(path.join(dir, 'metrics.jsonl'), 'utf8')).split('\n').filter(Boolean).map((l) => {
    const { wall_s: _w, tokens_per_s: _t, prefix_cache_hit_tokens: _h, prefilled_tokens: _p, kv_cache_budget_bytes: _b, kv_cache_peak_bytes: _kb, kv_cache_peak_sequences: _ks, ...m } = JSON.parse(l) as Record<string, unknown>;
    return m;
  });
  const ckpt = path.join(dir, 'checkpoints', 'step-0002');
  return {
    metrics,
    state: JSON.parse(await readFile(path.join(dir, 'state.json'), 'utf8')) as unknown,
    adapter: await readFile(path.join(ckpt, 'adapter_model.safetensors')),
    optimizer: await readFile(path.join(ckpt, 'optimizer.safetensors')),
  };
}


let reference: Awaited<ReturnType<typeof outcome>>;

describe('kill -9 mid-step and around the checkpoint commit', () => {
  it('the uninterrupted run (the reference)', async () => {
    const r = await mcprl(trainArgs('reference'));
    expect(r.code, r.stderr).toBe(0);
    reference = await outcome('reference');
    expect(reference.state).toMatchObject({ step: 2, stopped: 'max_steps' });
    // The second step trained (otherwise an adapter would prove nothing).
    expect(reference.metrics[2].sequences).toBeGreaterThan(0);
  }, 300_000);

  // Step 2's writes, in order: its checkpoint folder (filled aside, then swapped in, by the library), its
  // trajectories, validation, metrics.jsonl, and state.json, the commit point (written at steps 0, 1 and 2: the 3rd
  // is step 2's).
  const points: [string, string, string][] = [
    ['mid-step: step 2 trained, its checkpoint filled but not swapped in', 'before:checkpoints/step-0002', 'resumes from step 1; step 2 redone, the half checkpoint removed'],
    ['checkpoint swapped in, not committed', 'after:checkpoints/step-0002', 'resumes from step 1; the uncommitted checkpoint replaced'],
    ['trajectories written, not committed', 'after:trajectories/step-0002.jsonl', 'resumes from step 1; step 2 redone'],
    ['metrics written, state.json not committed', 'before:state.json#3', "resumes from step 1; step 2's metrics row dropped and redone"],
    ['state.json committed, report and export not written', 'after:state.json#3', 'resumes at step 2: only the report and the adapter written'],
  ];
  for (const [name, at, expected] of points) {
    it(`kill -9 ${name} (${at})`, async () => {
      expect(reference, 'the reference run').toBeDefined();
      const run = at.replace(/[^a-z0-9]+/gi, '-');
      const killed = await mcprlKilledAt(trainArgs(run), at);
      expect(killed.signal, killed.stderr).toBe('SIGKILL');
      const r = await mcprl(['train', '--run', run, '--runs-dir', runs, '--resume', '--quiet', ...FIXTURE]);
      expect(r.code, r.stderr).toBe(0);
      const got = await outcome(run);
      expect(got.state).toEqual(reference.state);
      expect(got.metrics).toEqual(reference.metrics);
      expect(got.adapter.equals(reference.adapter), 'adapter bytes').toBe(true);
      expect(got.optimizer.equals(reference.optimizer), 'optimizer bytes').toBe(true);
      // The end of the run was written too: the report, and the best adapter exactly when the reference has one.
      expect(existsSync(path.join(runs, run, 'report.html'))).toBe(true);
      expect(existsSync(path.join(runs, run, 'adapter'))).toBe(existsSync(path.join(runs, 'reference', 'adapter')));
      expect(await leftovers(path.join(runs, run))).toEqual([]);
      fault(`kill -9 ${name}`, `${expected}; same as an uninterrupted run`, 'resumed to identical metrics, adapter and optimizer bytes; no temporaries');
    }, 600_000);
  }
});
