/**
 * §1 of issue 12: an interrupted `mcprl eval` keeps what finished. The real CLI runs as a child process against
 * the real bookshop fixture server; the policy is a scripted HTTP double (a remote model cannot run here). One
 * scenario's requests hang, so the eval cannot finish before the signal; the test signals once the other groups
 * are on disk (it waits for the file, not for a time).
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { McpTrajectorySchema } from '../../src/agent/trajectory.js';
import { loadScenarioSet, writeScenarioSet, type Scenario } from '../../src/scenarios/scenario.js';
import { hangReply, startOpenAIDouble, type OpenAIDouble } from '../doubles/openai-double.js';
import { goodStrategy, taskOf, turnReply } from '../doubles/policy-double.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from '../helpers/servers.js';
import { ENTRY } from './cli.js';
import { fault } from './fault-table.js';

let dir: string;
let scenarios: Scenario[];
const doubles: OpenAIDouble[] = [];

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'mcprl-eval-int-'));
  const set = await loadScenarioSet(path.join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'));
  scenarios = set.train.filter((s) => (s.checks?.length ?? 0) > 0).slice(0, 4);
  await writeScenarioSet(path.join(dir, 'scenarios'), scenarios, []);
});

afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
  if (dir) await rm(dir, { recursive: true, force: true });
});

function evalCli(baseURL: string, out: string, extra: string[] = []) {
  const child = spawn(process.execPath, ['--import', 'tsx', ENTRY, 'eval', '--scenarios', path.join(dir, 'scenarios'), '--split', 'train', '--model-base-url', baseURL,
    '--model', 'double', '--concurrency', '4', '--out', out, ...extra, '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, OPENAI_API_KEY: 'test-key' } });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<{ code: number | null; stderr: string }>((resolve) => child.once('exit', (code) => resolve({ code, stderr })));
  return { child, exited };
}

const lines = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter((l) => l.trim() !== '') : []);

/** Resolves once `file` holds `n` complete lines (polling a file is the synchronisation; the limit is a safety net). */
async function waitForLines(file: string, n: number, limitMs = 240_000): Promise<void> {
  const until = Date.now() + limitMs;
  while (lines(file).length < n) {
    if (Date.now() > until) throw new Error(`${file} never reached ${n} lines`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('an interrupted `mcprl eval`', () => {
  it('on SIGINT writes the finished groups and their summary, exits non-zero, and --resume runs only the rest', async () => {
    const stuck = scenarios[3];
    const good = goodStrategy(scenarios);
    const hanging = await startOpenAIDouble([], { fallback: (req) => (taskOf(req.body) === stuck.task ? hangReply() : turnReply(good(req.body, req))) });
    doubles.push(hanging);
    const out = path.join(dir, 'out');
    const first = evalCli(hanging.baseURL, out);
    await waitForLines(path.join(out, 'trajectories.jsonl'), 3);
    first.child.kill('SIGINT');
    const r = await first.exited;
    expect(r.code).toBe(130);
    expect(r.stderr).toMatch(/interrupted by SIGINT; 3 of 4 scenarios finished/);
    const written = lines(path.join(out, 'trajectories.jsonl')).map((l) => McpTrajectorySchema.parse(JSON.parse(l)));
    expect(written.map((t) => t.scenario_id).sort()).toEqual(scenarios.slice(0, 3).map((s) => s.id).sort());
    const summary = JSON.parse(readFileSync(path.join(out, 'summary.json'), 'utf8'));
    expect(summary).toMatchObject({ interrupted: 'SIGINT', scenarios: 3, scenarios_requested: 4, trajectories: 3, successes: 3 });
    fault('SIGINT during `mcprl eval`', 'finished groups + summary written, exit ≠ 0', `exit ${r.code}; ${written.length} trajectories, summary of ${summary.scenarios}/4`);

    // A rerun without --resume does not overwrite them.
    const refused = await evalCli(hanging.baseURL, out).exited;
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/already holds trajectories: pass --resume/);

    const answering = await startOpenAIDouble([], { fallback: (req) => turnReply(good(req.body, req)) });
    doubles.push(answering);
    const second = await evalCli(answering.baseURL, out, ['--resume']).exited;
    expect(second.code, second.stderr).toBe(0);
    // Only the unfinished scenario was run again.
    const tasks = new Set(answering.requests.filter((q) => q.method === 'POST').map((q) => taskOf(q.body)));
    expect([...tasks]).toEqual([stuck.task]);
    const all = lines(path.join(out, 'trajectories.jsonl')).map((l) => McpTrajectorySchema.parse(JSON.parse(l)));
    expect(all.map((t) => t.scenario_id).sort()).toEqual(scenarios.map((s) => s.id).sort());
    const final = JSON.parse(readFileSync(path.join(out, 'summary.json'), 'utf8'));
    expect(final).toMatchObject({ scenarios: 4, trajectories: 4, successes: 4 });
    expect(final.interrupted).toBeUndefined();
    fault('`mcprl eval --resume` after an interrupt', 'only unfinished scenarios run', `ran ${tasks.size} scenario; summary of ${final.scenarios}/4`);
  });

  it('--resume drops a line a kill cut short, and the group it belonged to is run again', async () => {
    const out = path.join(dir, 'cut');
    const answering = await startOpenAIDouble([], { fallback: (req) => turnReply(goodStrategy(scenarios)(req.body, req)) });
    doubles.push(answering);
    const full = await evalCli(answering.baseURL, out).exited;
    expect(full.code, full.stderr).toBe(0);
    const text = readFileSync(path.join(out, 'trajectories.jsonl'), 'utf8');
    const kept = text.split('\n').filter(Boolean);
    // As if killed in the middle of appending the last group.
    writeFileSync(path.join(out, 'trajectories.jsonl'), kept.slice(0, 3).join('\n') + '\n' + kept[3].slice(0, 40));
    const before = answering.requests.length;
    const resumed = await evalCli(answering.baseURL, out, ['--resume']).exited;
    expect(resumed.code, resumed.stderr).toBe(0);
    const rerun = new Set(answering.requests.slice(before).filter((q) => q.method === 'POST').map((q) => taskOf(q.body)));
    expect(rerun.size).toBe(1);
    expect(lines(path.join(out, 'trajectories.jsonl')).map((l) => McpTrajectorySchema.parse(JSON.parse(l))).length).toBe(4);
  });
});
