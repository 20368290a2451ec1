/**
 * `mcprl train` end to end on the bundled tiny model and the real fixture server, shortened to a few steps.
 * This checks the loop's structure and its files (and that a run survives `kill -9`), not the learning curve:
 * that is measured by `npm run demo` and reported, never asserted by a seeded test.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isSuccess } from '../src/eval/evaluate.js';
import { McpTrajectorySchema, type McpTrajectory } from '../src/agent/trajectory.js';
import { loadScenarioSet, writeScenarioSet } from '../src/scenarios/scenario.js';
import { RunStateSchema } from '../src/train/run-dir.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from './helpers/servers.js';

const MODEL = process.env.MCPRL_TEST_TINY_MODEL ?? join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const ENTRY = join(REPO_ROOT, 'src', 'cli', 'entry.ts');
let work: string;
let scenarios: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-train-'));
  const all = await loadScenarioSet(join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'));
  scenarios = join(work, 'scenarios');
  // The test split: other held-out scenarios, only reported.
  await writeScenarioSet(scenarios, all.train.slice(0, 4), all.val.slice(0, 3), all.val.slice(3, 6));
});

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

function trainArgs(run: string, maxSteps: number, extra: string[] = []): string[] {
  return [
    '--import', 'tsx', ENTRY, 'train', '--model', MODEL, '--scenarios', scenarios, '--run', run, '--runs-dir', join(work, 'runs'),
    '--max-steps', String(maxSteps), '--eval-every', '1', '--groups-per-step', '2', '--rollouts-per-group', '2',
    '--max-turns', '3', '--max-tokens', '48', '--concurrency', '4', '--patience', '10', '--quiet', '--json', ...extra,
    '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN,
  ];
}

/** The README's resume command: only the run (and where runs live) and the target; the rest is the run's config.json. */
function resumeArgs(run: string, extra: string[] = []): string[] {
  return ['--import', 'tsx', ENTRY, 'train', '--run', run, '--runs-dir', join(work, 'runs'), '--resume', '--quiet', '--json', ...extra, '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];
}

function start(args: string[]): { child: ChildProcess; done: Promise<{ code: number | null; stdout: string; stderr: string }> } {
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => child.on('exit', (code) => resolve({ code, stdout, stderr })));
  return { child, done };
}

const readJsonl = async (file: string) => (await readFile(file, 'utf8')).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
const readState = async (dir: string) => RunStateSchema.parse(JSON.parse(await readFile(join(dir, 'state.json'), 'utf8')));

describe('mcprl train (tiny model, fixture server)', () => {
  it('runs the loop and writes every file of the run directory', async () => {
    const { done } = start(trainArgs('short', 2, ['--updates-per-step', '2', '--loss', 'dr_grpo']));
    const r = await done;
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout);
    const dir = join(work, 'runs', 'short');
    expect(out.run).toBe(dir);

    const state = await readState(dir);
    expect(state).toMatchObject({ step: 2, stopped: 'max_steps' });
    const metrics = await readJsonl(join(dir, 'metrics.jsonl'));
    expect(metrics.map((m) => m.step)).toEqual([0, 1, 2]);
    // Each step's validation success is the share of that step's validation trajectories that succeeded.
    for (const m of metrics) {
      const val: McpTrajectory[] = await readJsonl(join(dir, 'trajectories', `val-000${m.step}.jsonl`));
      expect(val).toHaveLength(3);
      expect(m.val_success, `step ${m.step}`).toBe(val.filter(isSuccess).length / val.length);
    }
    for (const m of metrics.slice(1)) {
      expect(typeof m.train_reward).toBe('number');
      expect(m.groups_dropped_zero_variance).toBeLessThanOrEqual(2);
      expect(Object.keys(m.wall_s)).toEqual(expect.arrayContaining(['gather', 'checkpoint', 'validate']));
    }
    expect(out.val_success_before).toBe(metrics[0].val_success);
    // Test: the untrained model at step 0; the last step and the selected checkpoint in the last row only.
    expect(metrics[0].test_success).toBeGreaterThanOrEqual(0);
    expect(metrics[1].test_success).toBeUndefined();
    expect(metrics[2]).toMatchObject({ best_step: state.bestStep });
    expect(out).toMatchObject({ test_success_before: metrics[0].test_success, test_success_last: metrics[2].test_success, test_success_best: metrics[2].test_success_best, last_step: 2 });
    if (state.bestStep === 0) expect(out.test_success_best).toBe(metrics[0].test_success);
    if (state.bestStep === 2) expect(out.test_success_best).toBe(metrics[2].test_success);
    // The test set runs once per step it is measured at (the last step's adapter is not measured again as the selected).
    const testStarts = (await readJsonl(join(dir, 'progress.jsonl'))).filter((e) => e.phase === 'test' && e.done === 0).map((e) => e.step);
    expect(testStarts).toEqual([0, ...(state.bestStep === 1 ? [1] : []), 2]);
    for (const step of new Set([0, state.bestStep, 2])) expect(await readJsonl(join(dir, 'trajectories', `test-000${step}.jsonl`))).toHaveLength(3);
    expect(await readJsonl(join(dir, 'scenarios', 'test.jsonl'))).toHaveLength(3);

    for (const step of [1, 2]) {
      const trajectories = await readJsonl(join(dir, 'trajectories', `step-000${step}.jsonl`));
      expect(trajectories).toHaveLength(4);
      // dr_grpo: a kept group's advantages are its rewards minus their mean, not divided by their spread.
      for (const id of new Set(trajectories.map((t) => t.scenario_id))) {
        const group = trajectories.filter((t) => t.scenario_id === id && t.advantage !== null);
        const mean = group.reduce((a, t) => a + t.reward, 0) / group.length;
        for (const t of group) expect(t.advantage).toBeCloseTo(t.reward - mean, 9);
      }
      for (const t of trajectories) {
        McpTrajectorySchema.parse(t);
        expect('advantage' in t).toBe(true);
        // Assistant turns of the local engine keep their exact sampled ids and logprobs.
        for (const m of t.messages.filter((x: { role: string }) => x.role === 'assistant')) expect(m.mcprl.token_ids.length).toBe(m.mcprl.logprobs.length);
      }
    }
    const checkpoints = await readdir(join(dir, 'checkpoints'));
    expect(checkpoints).toContain('step-0002');
    expect(checkpoints.length).toBeLessThanOrEqual(2);
    expect(existsSync(join(dir, 'checkpoints', 'step-0002', 'adapter_config.json'))).toBe(true);
    expect(existsSync(join(dir, 'checkpoints', 'step-0002', 'trainer_state.json'))).toBe(true);
    const html = await readFile(join(dir, 'report.html'), 'utf8');
    expect(html).toContain('Validation success');
    expect(html).toContain('Test success (held out from every decision)');
    expect(html).toContain('Success by tool and difficulty');
    expect(JSON.parse(await readFile(join(dir, 'config.json'), 'utf8'))).toMatchObject({ reward: 'checks', rolloutsPerGroup: 2, groupsPerStep: 2, updatesPerStep: 2, loss: 'dr_grpo' });
    // Where the engine ran and why (issue 44): auto, cpu on this machine (no driver, or no CUDA library built).
    expect(JSON.parse(await readFile(join(dir, 'config.json'), 'utf8'))).toMatchObject({
      device: 'auto', deviceChoice: { requested: 'auto', device: 'cpu', reason: expect.stringMatching(/^auto: cpu, because /) },
    });
    // Progress is data: every phase of every step, then the report and the end.
    const events = await readJsonl(join(dir, 'progress.jsonl'));
    expect(events[0]).toMatchObject({ phase: 'starting', step: 0, message: expect.stringMatching(/^device cpu \(auto: cpu, because .+\)$/) });
    const phases = (step: number) => [...new Set(events.filter((e) => e.step === step).map((e) => e.phase))];
    // The run folder exists from the start (its lock), so the job's 'starting' event is recorded too, then reading,
    // checking (held out) and writing the scenario set.
    expect(phases(0)).toEqual(['starting', 'read_scenarios', 'check_scenarios', 'write_scenarios', 'validate', 'test']);
    expect(phases(1)).toEqual(expect.arrayContaining(['gather', 'score', 'checkpoint', 'validate']));
    expect(phases(1)).not.toContain('test');
    expect(phases(2)).toEqual(expect.arrayContaining(['gather', 'score', 'checkpoint', 'validate', 'test', 'report', 'done']));
    expect(events.filter((e) => e.phase === 'gather' && e.step === 1).at(-1)).toMatchObject({ done: 4, total: 4 });
    expect(events.at(-2).phase).toBe('report');
    expect(events.at(-1)).toMatchObject({ phase: 'done', step: 2 });
    // The best step has the highest validation success, the latest of the trained steps that tie for it (step 0
    // when none beat the untrained model), and the run's adapter is exported from it exactly when it is a trained step.
    let best = metrics[0];
    for (const m of metrics.slice(1)) if (m.val_success > best.val_success || (m.val_success === best.val_success && best.step > 0)) best = m;
    expect(state).toMatchObject({ bestStep: best.step, bestValSuccess: best.val_success });
    expect(existsSync(join(dir, 'adapter', 'adapter_model.safetensors'))).toBe(best.step > 0);

    // `mcprl report <run>` regenerates the report; `mcprl export <run>` takes the run's base model.
    await rm(join(dir, 'report.html'));
    const regenerated = await start(['--import', 'tsx', ENTRY, 'report', 'short', '--runs-dir', join(work, 'runs')]).done;
    expect(regenerated.code, regenerated.stderr).toBe(0);
    expect(await readFile(join(dir, 'report.html'), 'utf8')).toContain('Before and after training');
    const exported = join(work, 'exported');
    const exp = await start(['--import', 'tsx', ENTRY, 'export', dir, '--adapter', join(dir, 'checkpoints', 'step-0002'), '--format', 'merged', '--out', exported]).done;
    expect(exp.code, exp.stderr).toBe(0);
    expect(JSON.parse(await readFile(join(exported, 'config.json'), 'utf8')).model_type).toBe('qwen3');
    expect(existsSync(join(exported, 'tokenizer.json'))).toBe(true);
  }, 600_000);

  it('survives kill -9 mid-run: --resume continues from the newest complete step and loses none', async () => {
    const dir = join(work, 'runs', 'killed');
    const { child, done } = start(trainArgs('killed', 3));
    // Wait until step 1 is committed, then kill the whole process group while step 2 is in flight.
    for (let i = 0; i < 1200; i++) {
      if (existsSync(join(dir, 'state.json')) && (await readState(dir).catch(() => ({ step: 0 }))).step >= 1) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    process.kill(-child.pid!, 'SIGKILL');
    await done;
    const killedAt = await readState(dir);
    expect(killedAt.step).toBeGreaterThanOrEqual(1);
    const before = await readJsonl(join(dir, 'metrics.jsonl'));

    const r = await start(resumeArgs('killed')).done;
    expect(r.code, r.stderr).toBe(0);
    expect(await readState(dir)).toMatchObject({ step: 3, stopped: 'max_steps' });
    const after = await readJsonl(join(dir, 'metrics.jsonl'));
    expect(after.map((m) => m.step)).toEqual([0, 1, 2, 3]);
    // Completed steps are kept exactly as they were.
    expect(after.slice(0, killedAt.step + 1)).toEqual(before.filter((m) => m.step <= killedAt.step));
    for (const step of [1, 2, 3]) expect(existsSync(join(dir, 'trajectories', `step-000${step}.jsonl`))).toBe(true);
    expect(existsSync(join(dir, 'checkpoints', 'step-0003', 'adapter_model.safetensors'))).toBe(true);

    // A setting given again with another value is refused, not silently ignored; the same value is fine.
    const changed = await start(resumeArgs('killed', ['--lr', '0.01', '--max-steps', '3'])).done;
    expect(changed.code).toBe(1);
    expect(changed.stderr).toMatch(/--resume continues .* these differ: --lr 0.01 \(the run has 0.0005\)\. Start a new run/);
  }, 900_000);

  it('--max-steps 0 checks the set, measures step 0 (validation and test) as a run does, writes the run and trains nothing', async () => {
    const r = await start(trainArgs('zero', 0)).done;
    expect(r.code, r.stderr).toBe(0);
    const dir = join(work, 'runs', 'zero');
    expect(JSON.parse(r.stdout)).toMatchObject({ run: dir, best_step: 0, stopped: 'max_steps', last_step: 0, adapter: null });
    expect(await readState(dir)).toMatchObject({ step: 0, bestStep: 0, stopped: 'max_steps' });
    const metrics = await readJsonl(join(dir, 'metrics.jsonl'));
    expect(metrics.map((m) => m.step)).toEqual([0]);
    expect(typeof metrics[0].val_success).toBe('number');
    expect(typeof metrics[0].test_success).toBe('number');
    expect(await readJsonl(join(dir, 'trajectories', 'val-0000.jsonl'))).toHaveLength(3);
    expect(await readJsonl(join(dir, 'trajectories', 'test-0000.jsonl'))).toHaveLength(3);
    expect((await readdir(join(dir, 'trajectories'))).sort()).toEqual(['test-0000.jsonl', 'val-0000.jsonl']);
    expect(JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')).maxSteps).toBe(0);
    for (const f of ['report.html', 'scenarios/train.jsonl', 'scenarios/val.jsonl', 'scenarios/test.jsonl']) expect(existsSync(join(dir, f)), f).toBe(true);
    expect(existsSync(join(dir, 'checkpoints', 'step-0001'))).toBe(false);
  });

  it('needs --model for a new run, and --run for --resume', async () => {
    const noModel = await start(trainArgs('nomodel', 1).filter((a, i, all) => a !== '--model' && all[i - 1] !== '--model')).done;
    expect(noModel.code).toBe(1);
    expect(noModel.stderr).toMatch(/mcprl train: --model DIR is required/);
    const noRun = await start(resumeArgs('x').filter((a, i, all) => a !== '--run' && all[i - 1] !== '--run')).done;
    expect(noRun.code).toBe(1);
    expect(noRun.stderr).toMatch(/mcprl train: --resume needs --run NAME/);
  }, 120_000);

  it('refuses a bad setting naming its flag and the value given, before a run folder exists', async () => {
    const cases: [string, string, RegExp][] = [['--lr', '0', /mcprl train: --lr 0: Too small: expected number to be >0/], ['--temperature', 'hot', /mcprl train: --temperature "hot": expected a number/]];
    for (const [flag, value, message] of cases) {
      const r = await start(trainArgs(`bad${flag}`, 1, [flag, value])).done;
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(message);
      expect(existsSync(join(work, 'runs', `bad${flag}`))).toBe(false);
    }
  }, 120_000);

  it('draws by pass rate, retires scenarios scored alike, replaces groups without signal, trains at the sampling temperature with constrained calls, decays the lr', async () => {
    const r = await start(trainArgs('curriculum', 2, [
      '--curriculum', 'pass_rate', '--curriculum-retire-after', '1', '--resample-rounds', '2', '--temperature', '0.7', '--train-at-sampling-temperature',
      '--constrain-tool-calls', '--lr-schedule', 'cosine', '--beta', '0.05',
    ])).done;
    expect(r.code, r.stderr).toBe(0);
    const dir = join(work, 'runs', 'curriculum');
    const metrics = await readJsonl(join(dir, 'metrics.jsonl'));
    const state = await readState(dir);
    for (const step of [1, 2]) {
      const m = metrics[step];
      // At most two rounds, each replacing at most the two groups of a step; every gathered group is on file.
      expect(m.resample_rounds).toBeLessThanOrEqual(2);
      expect(m.groups_replaced).toBeLessThanOrEqual(2 * m.resample_rounds);
      expect(m.groups).toBe(2 + m.groups_replaced);
      expect(m.groups_trained).toBe(m.groups - m.groups_dropped_zero_variance);
      expect(m.groups_trained).toBeLessThanOrEqual(2);
      const trajectories = await readJsonl(join(dir, 'trajectories', `step-000${step}.jsonl`));
      expect(trajectories).toHaveLength(2 * m.groups);
      // Every sampled turn records the temperature its logprobs are at, and that its calls were constrained:
      // none of them is malformed, and every fixture tool's schema could be enforced, its id patterns included.
      for (const t of trajectories) {
        for (const a of t.messages.filter((x: { role: string }) => x.role === 'assistant')) expect(a.mcprl).toMatchObject({ temperature: 0.7, constrained: true });
        // Only a turn cut off by the token limit can leave a call unfinished.
        for (const line of t.logs.filter((l: string) => /unparseable tool call/.test(l))) expect(line).toMatch(/unterminated/);
      }
      expect(m).toMatchObject({ constrain_unsupported_tools: 0, constrain_relaxed_tools: 0, constrain_dead_ends: 0 });
    }
    // The curriculum learnt a pass rate for every scenario it gathered, and saved it with the step.
    const gathered = new Set((await readJsonl(join(dir, 'trajectories', 'step-0001.jsonl'))).map((t) => t.scenario_id));
    for (const id of gathered) expect(state.curriculum?.[id]?.attempts).toBeGreaterThan(0);
    // Each scenario's saved streak counts its groups in a row, up to its latest, whose scored attempts all scored
    // alike: those counted in groups_dropped_zero_variance.
    const streak = new Map<string, number>();
    let alikeGroups = 0;
    for (const step of [1, 2]) {
      const byScenario = new Map<string, number[]>();
      for (const t of await readJsonl(join(dir, 'trajectories', `step-000${step}.jsonl`))) byScenario.set(t.scenario_id, [...(byScenario.get(t.scenario_id) ?? []), t.reward]);
      for (const [id, rewards] of byScenario) {
        const alike = Math.max(...rewards) - Math.min(...rewards) <= 1e-9;
        alikeGroups += alike ? 1 : 0;
        streak.set(id, alike ? (streak.get(id) ?? 0) + 1 : 0);
      }
    }
    expect(alikeGroups).toBe(metrics[1].groups_dropped_zero_variance + metrics[2].groups_dropped_zero_variance);
    for (const [id, n] of streak) expect(state.curriculum?.[id]?.alike ?? 0, id).toBe(n);
    // Cosine decay over maxSteps × updatesPerStep = 2 optimiser steps: the second uses half the peak.
    const lrs = metrics.slice(1).filter((m) => m.lr !== undefined).map((m) => m.lr);
    if (lrs.length === 2) expect(lrs[1]).toBeCloseTo(lrs[0] / 2, 12);
  }, 600_000);

  it('refuses validation scenarios that overlap the training scenarios', async () => {
    const overlap = join(work, 'overlap');
    const all = await loadScenarioSet(scenarios);
    await writeScenarioSet(overlap, all.train, [all.train[0]]);
    const r = await start(trainArgs('overlap', 1).map((a) => (a === scenarios ? overlap : a))).done;
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/mcprl train: 1 validation scenario\(s\) overlap other sets \(1 with train\).*Instead: remove/);
    expect(existsSync(join(work, 'runs', 'overlap', 'config.json'))).toBe(false);

    await writeScenarioSet(overlap, all.train, all.val, [all.val[1]]);
    const t = await start(trainArgs('overlap', 1).map((a) => (a === scenarios ? overlap : a))).done;
    expect(t.code).toBe(1);
    expect(t.stderr).toMatch(/mcprl train: 1 test scenario\(s\) overlap other sets \(1 with (train|validation)/);
  }, 120_000);
});
