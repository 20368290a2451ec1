/**
 * §2 of issue 12, training that trains nothing: the real `mcprl train` (the bundled tiny model, the real engine,
 * the real fixture server) with the infrastructure failing around it. The judge is a local HTTP double (a remote
 * LLM API cannot run here) that refuses every request; the unreachable target is a closed local port.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpError, startOpenAIDouble, type OpenAIDouble } from '../doubles/openai-double.js';
import { FIXTURE_SERVER_MAIN, freePort, REPO_ROOT } from '../helpers/servers.js';
import { bookshopScenarios, mcprl } from './cli.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const SMALL = ['--groups-per-step', '1', '--rollouts-per-group', '2', '--max-turns', '2', '--max-tokens', '24', '--concurrency', '2', '--val-rollouts', '1'];
let work: string;
let scenarios: string;
let judge: OpenAIDouble;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-untrained-'));
  scenarios = await bookshopScenarios(path.join(work, 'scenarios'), 3, 2);
  // A judge that refuses every request (a revoked key): not retryable, so every group is unscored at once.
  judge = await startOpenAIDouble([], { fallback: httpError(401, 'invalid api key') });
});

afterAll(async () => {
  await judge?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

const train = (args: string[]) =>
  mcprl(['train', '--model', MODEL, '--scenarios', scenarios, '--runs-dir', path.join(work, 'runs'), '--quiet', ...SMALL, ...args], { env: { ...process.env, OPENAI_API_KEY: 'test-key' } });

const jsonl = (file: string) => readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, any>);

describe('training that trains nothing', () => {
  it('stops with a clear error after --max-untrained-steps steps whose every group was unscored (judge down)', async () => {
    const r = await train(['--run', 'judge-down', '--reward', 'ruler', '--judge-base-url', judge.baseURL, '--judge-model', 'judge', '--max-untrained-steps', '2',
      '--max-steps', '6', '--eval-every', '6', '--timeout', '120000', '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/steps 1-2 trained nothing: every rollout was lost to an infrastructure failure \(first: judge failed/);
    const dir = path.join(work, 'runs', 'judge-down');
    const rows = jsonl(path.join(dir, 'metrics.jsonl'));
    expect(rows.map((m) => m.step)).toEqual([0, 1, 2]);
    for (const m of rows.slice(1)) expect(m).toMatchObject({ sequences: 0, infra_failures: 2, task_failures: 0, unscored: 2 });
    // The run is kept, at the last complete step, for --resume.
    expect(JSON.parse(readFileSync(path.join(dir, 'state.json'), 'utf8')).step).toBe(2);
    fault('judge down during training (every group unscored)', `error after N steps, exit 1`, `stopped after step 2: exit ${r.code}`);
  });

  it('refuses to record the untrained model\'s validation when its rollouts failed on infrastructure (target down)', async () => {
    const port = await freePort();
    const r = await train(['--run', 'target-down', '--max-steps', '2', '--timeout', '5000', `http://127.0.0.1:${port}/mcp`]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/validation of the untrained model \(step 0\): 2 of 2 rollouts failed on infrastructure, not on the task/);
    const dir = path.join(work, 'runs', 'target-down');
    // No figure was recorded as a model result.
    expect(existsSync(path.join(dir, 'metrics.jsonl'))).toBe(false);
    expect(existsSync(path.join(dir, 'state.json'))).toBe(false);
    expect(r.stderr).toContain('--resume');
    fault('target down at validation', 'no validation figure recorded; error', 'step 0 refused, nothing in metrics.jsonl');
  });
});
