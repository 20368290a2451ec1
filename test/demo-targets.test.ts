/**
 * `npm run demo -- --target memory|filesystem`: the whole pipeline on a published server from node_modules, two
 * steps with small counts (the demo's own settings otherwise). Asserts that it ran — the scenario set with its test
 * split, metrics at step 0 and step 2 with test success, the per-kind test table printed from the run's files — and
 * that the data the demo wrote for the server's sandboxes is byte for byte what it wrote, with no sandbox left.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadScenarioSet } from '../src/scenarios/scenario.js';
import { formatKindTable, kindTable } from '../scripts/demo-table.js';
import { publishedTarget } from '../scripts/demo-targets.js';
import { REPO_ROOT } from './helpers/servers.js';

// Small counts for CI time: 2 scenarios × 2 attempts per step, short turns, validation every step.
const SMALL = ['--groups-per-step', '2', '--rollouts-per-group', '2', '--max-turns', '2', '--max-tokens', '32', '--eval-every', '1', '--resample-rounds', '0', '--concurrency', '4'];

let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-demo-targets-'));
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

/** `npm run demo -- ARGS -- SMALL` as a child process with its own TMPDIR; resolves with its exit code and output. */
function demo(args: string[], tmp: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(REPO_ROOT, 'scripts', 'demo.ts'), ...args, '--', ...SMALL], {
      cwd: REPO_ROOT, env: { ...process.env, TMPDIR: tmp }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

const readJsonl = async (file: string) => (await readFile(file, 'utf8')).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));

describe.each(['memory', 'filesystem'] as const)('npm run demo -- --target %s', (name) => {
  it('runs scenarios, two training steps, validation and test on the sandboxed published server', async () => {
    const runs = join(work, name, 'runs');
    const tmp = join(work, name, 'tmp');
    await mkdir(tmp, { recursive: true });
    const r = await demo(['--target', name, '--max-steps', '2', '--count', '16', '--runs-dir', runs, '--run', 'demo'], tmp);
    expect(r.code, r.stderr).toBe(0);

    // The scenario set the demo made: train, validation and a test split, all three used by the run.
    const inputs = (await readdir(runs)).filter((f) => f.startsWith(`demo-${name}-inputs-`));
    expect(inputs).toHaveLength(1);
    const set = await loadScenarioSet(join(runs, inputs[0], 'scenarios'));
    for (const split of [set.train, set.val, set.test]) expect(split.length).toBeGreaterThan(0);
    expect(await loadScenarioSet(join(runs, 'demo', 'scenarios'))).toEqual(set);

    const metrics = await readJsonl(join(runs, 'demo', 'metrics.jsonl'));
    expect(metrics.map((m) => m.step)).toEqual([0, 1, 2]);
    expect(typeof metrics[0].test_success).toBe('number');
    expect(metrics[2]).toMatchObject({ test_success: expect.any(Number), test_success_best: expect.any(Number), best_step: expect.any(Number) });

    // The per-kind table, printed from the run's own files: a row per kind of test task and the overall row.
    const kinds = await kindTable(join(runs, 'demo'));
    expect(kinds!.rows.reduce((a, row) => a + row.scenarios, 0)).toBe(set.test.length);
    expect(r.stdout).toContain(`Test success per kind of task (${name}, seed 1):\n${formatKindTable(kinds!, false)}`);

    // The data every sandbox was copied from is what the demo wrote, file for file; no sandbox is left behind.
    const source = join(runs, inputs[0], 'source');
    const files = publishedTarget(name).files;
    expect((await readdir(source, { recursive: true, withFileTypes: true })).filter((e) => e.isFile()).length).toBe(Object.keys(files).length);
    for (const [file, data] of Object.entries(files)) expect(await readFile(join(source, file)), file).toEqual(Buffer.from(data));
    expect(r.stderr).toContain(`${source} unchanged (${Object.keys(files).length} files, sha256)`);
    expect((await readdir(tmp)).filter((f) => f.startsWith('mcprl-sandbox-'))).toEqual([]);
  }, 600_000);
});
