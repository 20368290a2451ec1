import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunDir } from '../src/train/run-dir.js';
import { writeJsonAtomic } from '../src/util/atomic.js';
import { formatScenarios, type Scenario } from '../src/scenarios/scenario.js';
import { writeFileAtomic } from '../src/util/atomic.js';
import { formatKindTable, formatRunTables, formatSeedTable, kindTable, meanKindTable, seedRow } from './demo-table.js';

let work: string;

async function fakeRun(name: string, seed: number, test: [number, number, number]): Promise<string> {
  const run = new RunDir(join(work, name));
  await writeJsonAtomic(run.path('config.json'), { seed });
  await run.writeMetrics([
    { step: 0, val_success: 0.25, test_success: test[0], wall_s: { validate: 3 } },
    { step: 1, groups: 8, groups_dropped_zero_variance: 4, wall_s: { gather: 10 } },
    { step: 2, groups: 8, groups_dropped_zero_variance: 2, val_success: 0.5, test_success: test[2], test_success_best: test[1], best_step: 2, wall_s: { gather: 10, validate: 2 } },
  ]);
  await run.commit({ step: 2, bestStep: 2, bestValSuccess: 0.5, evalsWithoutImprovement: 0, stopped: 'max_steps' });
  return run.dir;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-demo-table-'));
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe('the demo seeds table', () => {
  it('reads each run folder and prints one row per seed and the mean', async () => {
    const a = await seedRow(await fakeRun('a', 1, [0.2, 0.6, 0.5]));
    const b = await seedRow(await fakeRun('b', 2, [0.2, 0.4, 0.4]), 125);
    expect(a).toMatchObject({ seed: 1, valBefore: 0.25, valBest: 0.5, bestStep: 2, lastStep: 2, testBefore: 0.2, testBest: 0.6, testLast: 0.5, zeroVarianceShare: 6 / 16, wallS: 25 });
    expect(b.wallS).toBe(125);
    const lines = formatSeedTable([a, b]).split('\n');
    expect(lines).toHaveLength(5);
    expect(lines[2]).toBe('| 1 | 25.0% | 50.0% (2) | 20.0% | 60.0% | +40.0 | 50.0% (2) | -10.0 | 37.5% | 0 min 25 s |');
    expect(lines[4]).toBe('| mean | 25.0% | 50.0% | 20.0% | 50.0% | +30.0 | 45.0% | -5.0 | 37.5% | 1 min 15 s |');
  });
});

describe('the demo per-kind test table', () => {
  const scenario = (id: string, difficulty: number, tool: string): Scenario => ({
    id, task: id, difficulty, source: 'schema', checks: [{ kind: 'tool_called', tool, args: {} }, { kind: 'answer_contains', value: 'x' }],
  });
  // What a test rollout writes that decides success: completed, no error, every check passed.
  const attempt = (id: string, ok: boolean) => JSON.stringify({ scenario_id: id, messages: [], reward: ok ? 1 : 0, metrics: { completed: true, checks_total: 2, checks_passed: ok ? 2 : 1 } });

  it('reads the run\'s test set and its step-0 and selected-step test trajectories, one row per tool shape × difficulty', async () => {
    const dir = await fakeRun('kinds', 1, [0.25, 0.75, 0.5]);
    const run = new RunDir(dir);
    await writeFileAtomic(run.path('scenarios', 'test.jsonl'), formatScenarios([scenario('a', 1, 'get_book'), scenario('b', 1, 'get_book'), scenario('c', 2, 'get_book'), scenario('d', 1, 'search_books')]));
    await writeFileAtomic(run.testTrajectories(0), [attempt('a', true), attempt('b', false), attempt('c', false), attempt('d', false)].join('\n') + '\n');
    await writeFileAtomic(run.testTrajectories(2), [attempt('a', true), attempt('b', true), attempt('c', false), attempt('d', true)].join('\n') + '\n');
    const t = await kindTable(dir);
    expect(t).toEqual({
      run: dir, bestStep: 2, rows: [
        { surface: 'get_book', difficulty: 1, scenarios: 2, success: [0.5, 1] },
        { surface: 'get_book', difficulty: 2, scenarios: 1, success: [0, 0] },
        { surface: 'search_books', difficulty: 1, scenarios: 1, success: [0, 1] },
      ],
    });
    expect(formatKindTable(t!).split('\n')).toEqual([
      '| tool shape | difficulty | test tasks | untrained | selected (step 2) | gain |',
      '| --- | --- | --- | --- | --- | --- |',
      '| get_book | 1 | 2 | 50.0% | 100.0% | +50.0 |',
      '| get_book | 2 | 1 | 0.0% | 0.0% | +0.0 |',
      '| search_books | 1 | 1 | 0.0% | 100.0% | +100.0 |',
      '| all |  | 4 | 25.0% | 75.0% | +50.0 |',
    ]);
  });

  it('averages several seeds\' tables kind by kind, over the rates each has', () => {
    const row = (surface: string, difficulty: number, success: (number | null)[]) => ({ surface, difficulty, scenarios: 2, success });
    const mean = meanKindTable([
      { run: 'a', bestStep: 4, rows: [row('get_book', 1, [0, 1]), row('search_books', 1, [0, null])] },
      { run: 'b', bestStep: 6, rows: [row('get_book', 1, [0.5, 0.5]), row('search_books', 1, [0, 0.5])] },
    ]);
    expect(mean).toEqual({ run: 'a, b', bestStep: null, rows: [row('get_book', 1, [0.25, 0.75]), row('search_books', 1, [0, 0.5])] });
    expect(formatKindTable(mean).split('\n')[0]).toBe('| tool shape | difficulty | test tasks | untrained | selected | gain |');
  });

  it('prints, for runs made one by one, the mean per kind that one --seeds run prints', async () => {
    const dirs: string[] = [];
    for (const [name, selected] of [['one', [true, false]], ['two', [true, true]]] as const) {
      const run = new RunDir(await fakeRun(name, dirs.length + 1, [0, 0.5, 0.5]));
      await writeFileAtomic(run.path('scenarios', 'test.jsonl'), formatScenarios([scenario('a', 1, 'get_book'), scenario('b', 1, 'get_book')]));
      await writeFileAtomic(run.testTrajectories(0), [attempt('a', false), attempt('b', false)].join('\n') + '\n');
      await writeFileAtomic(run.testTrajectories(2), [attempt('a', selected[0]), attempt('b', selected[1])].join('\n') + '\n');
      dirs.push(run.dir);
    }
    const text = await formatRunTables(dirs, true);
    expect(text).toContain(`Test success per kind, ${dirs[0]}:`);
    expect(text.split('Test success per kind, mean of 2 runs:\n')[1].split('\n')).toEqual([
      '| tool shape | difficulty | test tasks | untrained | selected (step 2) | gain |',
      '| --- | --- | --- | --- | --- | --- |',
      '| get_book | 1 | 2 | 0.0% | 75.0% | +75.0 |',
      '| all |  | 2 | 0.0% | 75.0% | +75.0 |',
    ]);
    expect(await formatRunTables([dirs[0]], true)).not.toContain('mean of');
  });

  it('is null for a run without a test set', async () => {
    expect(await kindTable(await fakeRun('no-test', 1, [0.2, 0.6, 0.5]))).toBeNull();
  });
});
