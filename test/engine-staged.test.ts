/**
 * One code path for every backend (issue 44 §3, §7): `mcprl train` (2 steps) and `mcprl eval` of the trained adapter,
 * through the real CLI on the bundled tiny model and the fixture server, once on the CPU backend and once on
 * cpu-staged — the same CPU ops with their memory declared elsewhere (native/backend/backend_staged.cc: every buffer in a range
 * host code cannot touch, every host<->backend move an upload or download), selected by $MCPRL_ENGINE_BACKEND, the
 * test seam of src/engine/device.ts. The staged run exercises the orchestration a GPU run needs (weights moved by
 * Model::to_backend, adapters, KV cache and prefix cache, sampling on downloaded logits, scoring, the LoRA step,
 * clipping, AdamW, the checkpoint's downloads); its results must be the CPU run's, bit for bit.
 *
 * Compared: every metrics.jsonl field but the timings (wall_s, tokens_per_s); the adapter and optimiser files; every
 * trajectory's messages, sampled ids, logprobs and rewards, but the tool-call ids (random per process) and the
 * latencies and timed log lines. The KV budget is given (--kv-cache-mib) so that it does not follow the memory free.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineOf, Model } from '../src/engine/model.js';
import { loadScenarioSet, writeScenarioSet } from '../src/scenarios/scenario.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from './helpers/servers.js';

const MODEL = process.env.MCPRL_TEST_TINY_MODEL ?? join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const ENTRY = join(REPO_ROOT, 'src', 'cli', 'entry.ts');
const SERVER = ['--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];
let work = '';
let scenarios = '';

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-staged-'));
  const all = await loadScenarioSet(join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'));
  scenarios = join(work, 'scenarios');
  await writeScenarioSet(scenarios, all.train.slice(0, 4), all.val.slice(0, 3), all.val.slice(3, 5));
});

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

function cli(args: string[], backend: 'cpu' | 'cpu-staged'): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = { ...process.env, MCPRL_ENGINE_BACKEND: backend === 'cpu-staged' ? 'cpu-staged' : '' };
  const child = spawn(process.execPath, ['--import', 'tsx', ENTRY, ...args], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, stdout, stderr })));
}

/** A file's JSON lines with what differs between processes by design taken out (see the file's comment). */
function comparable(file: string): unknown[] {
  // Measurements of when things happened, not of what was computed: timings, and the KV cache's peaks, which depend
  // on how the rollouts' turns happened to overlap in the engine (the same bytes, at different moments).
  const drop = new Set(['wall_s', 'tokens_per_s', 'latency_ms', 'logs', 'kv_cache_peak_bytes', 'kv_cache_peak_sequences']);
  return readFileSync(file, 'utf8').split('\n').filter((l) => l.trim()).map((l) =>
    JSON.parse(l, (k, v) => (drop.has(k) ? undefined : typeof v === 'string' && /^call_[0-9a-f]{24}$/.test(v) ? 'call_*' : v)));
}

const files = (dir: string) => readdirSync(dir, { recursive: true, withFileTypes: true }).filter((d) => d.isFile()).map((d) => join(d.parentPath, d.name).slice(dir.length + 1)).sort();

describe('cpu-staged against cpu through the CLI', () => {
  it('the seam selects the staged backend', async () => {
    process.env.MCPRL_ENGINE_BACKEND = 'cpu-staged';
    try {
      const model = await Model.load(MODEL, { device: 'cpu', threads: 1, kvCacheMib: 64 });
      expect(engineOf(model).backend()).toBe('cpu-staged');
      model.close();
    } finally {
      delete process.env.MCPRL_ENGINE_BACKEND;
    }
  });

  it('train 2 steps, then eval the adapter: the same metrics, checkpoints and trajectories bit for bit', async () => {
    const runs: Record<string, string> = {};
    for (const backend of ['cpu', 'cpu-staged'] as const) {
      const run = join(work, 'runs', backend);
      runs[backend] = run;
      const train = await cli([
        'train', '--model', MODEL, '--scenarios', scenarios, '--run', backend, '--runs-dir', join(work, 'runs'), '--device', 'cpu',
        '--max-steps', '2', '--eval-every', '1', '--groups-per-step', '2', '--rollouts-per-group', '2', '--max-turns', '3',
        '--max-tokens', '48', '--concurrency', '4', '--patience', '10', '--seed', '1', '--kv-cache-mib', '64', '--quiet', '--json', ...SERVER,
      ], backend);
      expect(train.code, train.stderr).toBe(0);
      const evalRun = await cli([
        'eval', '--scenarios', scenarios, '--split', 'val', '--model', MODEL, '--adapter', join(run, 'adapter'), '--device', 'cpu',
        '--rollouts', '2', '--temperature', '1', '--seed', '3', '--max-turns', '2', '--max-tokens', '48', '--out', join(work, 'eval', backend), '--json', ...SERVER,
      ], backend);
      expect(evalRun.code, evalRun.stderr).toBe(0);
    }
    const [cpu, staged] = [runs.cpu, runs['cpu-staged']];
    const metrics = comparable(join(cpu, 'metrics.jsonl'));
    expect(metrics).toHaveLength(3);
    // Step 2 trained (a group kept): otherwise the comparison would not cover the LoRA step.
    expect(metrics[2]).toMatchObject({ sequences: expect.any(Number), grad_norm: expect.any(Number) });
    expect((metrics[2] as { grad_norm: number }).grad_norm).toBeGreaterThan(0);
    expect(comparable(join(staged, 'metrics.jsonl'))).toEqual(metrics);
    for (const f of ['adapter/adapter_model.safetensors', 'checkpoints/step-0002/adapter_model.safetensors', 'checkpoints/step-0002/optimizer.safetensors']) {
      expect(readFileSync(join(staged, f)).equals(readFileSync(join(cpu, f))), f).toBe(true);
    }
    const traj = files(join(cpu, 'trajectories'));
    expect(files(join(staged, 'trajectories'))).toEqual(traj);
    for (const f of traj) expect(comparable(join(staged, 'trajectories', f)), f).toEqual(comparable(join(cpu, 'trajectories', f)));
    // An eval appends each group as it is scored (so an interrupted eval keeps it): the file's order is the order
    // groups finished in, which concurrency leaves open; compared by trajectory id.
    const byId = (ts: unknown[]) => [...ts].sort((a, b) => String((a as { id: string }).id).localeCompare(String((b as { id: string }).id)));
    const evalCpu = byId(comparable(join(work, 'eval', 'cpu', 'trajectories.jsonl')));
    expect(evalCpu.length).toBe(6);
    expect(byId(comparable(join(work, 'eval', 'cpu-staged', 'trajectories.jsonl')))).toEqual(evalCpu);
  });
});
