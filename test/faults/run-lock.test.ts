/**
 * Faults of §1 and §5 of issue 12 around the run folder: two `mcprl train` processes on one run, stale locks of
 * processes that died, temporaries a kill left behind, and a train that fails before step 0. The real CLI runs as
 * a child process; the test itself holds the lock (explicit synchronisation: the holder exists before the second
 * process starts, so the outcome does not depend on timing).
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SafetyPolicy } from '../../src/mcp/policy.js';
import { TrainingJobs } from '../../src/mcp-server/training-jobs.js';
import { Workspace } from '../../src/mcp-server/workspace.js';
import { loadScenarioSet, writeScenarioSet } from '../../src/scenarios/scenario.js';
import { DirLock, lockFile, processStart, readLockOwner, type LockOwner } from '../../src/util/dir-lock.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from '../helpers/servers.js';
import { bookshopScenarios, mcprl } from './cli.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
let work: string;
let scenarios: string;
let overlapping: string;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-lock-'));
  scenarios = await bookshopScenarios(path.join(work, 'scenarios'), 2, 2);
  const all = await loadScenarioSet(path.join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'));
  // Validation repeats training: `mcprl train` refuses it after taking the lock and before loading a model.
  overlapping = path.join(work, 'overlap');
  await writeScenarioSet(overlapping, all.train.slice(0, 2), all.train.slice(0, 2));
});

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

const train = (args: string[]) => mcprl(['train', '--runs-dir', path.join(work, 'runs'), '--quiet', ...args, '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN]);

/** The pid of a process that has exited (and been reaped), so nothing runs under it now. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await new Promise((r) => child.once('exit', r));
  return child.pid!;
}

const writeLock = (dir: string, owner: LockOwner) => writeFile(lockFile(dir), JSON.stringify(owner));

describe('run-folder lock', () => {
  it('a second `mcprl train` on a run another process trains fails with one line naming the holder, and touches nothing', async () => {
    const dir = path.join(work, 'runs', 'busy');
    await mkdir(dir, { recursive: true });
    const held = DirLock.acquire(dir, 'test');
    try {
      const r = await train(['--model', MODEL, '--scenarios', scenarios, '--run', 'busy', '--max-steps', '1']);
      expect(r.code).toBe(1);
      const lines = r.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain(`pid ${process.pid}`);
      expect(lines[0]).toContain(`process start ${processStart(process.pid)}`);
      // Only the holder's lock is in the folder: no config, no progress, no scenarios were written.
      expect(await readdir(dir)).toEqual(['lock']);
      expect(readLockOwner(dir)).toEqual(held.owner);
      fault('two `mcprl train` on one run folder', 'second exits 1 naming the holder; folder untouched', `exit ${r.code}: ${lines[0].slice(0, 90)}…`);
    } finally {
      held.release();
    }
    expect(existsSync(lockFile(dir))).toBe(false);
  });

  it('a lock of a dead pid, or of a reused pid with another start time, is stale and taken over', async () => {
    const dir = path.join(work, 'stale');
    await mkdir(dir, { recursive: true });
    const dead: LockOwner = { pid: await deadPid(), start: '1', host: hostname(), since: '2026-01-01T00:00:00.000Z' };
    await writeLock(dir, dead);
    const a = DirLock.acquire(dir, 'test');
    expect(a.tookOver).toEqual(dead);
    a.release();
    // Our own pid, but as if it had belonged to a process that started at another time.
    const reused: LockOwner = { pid: process.pid, start: `${processStart(process.pid)}0`, host: hostname(), since: '2026-01-01T00:00:00.000Z' };
    await writeLock(dir, reused);
    const b = DirLock.acquire(dir, 'test');
    expect(b.tookOver).toEqual(reused);
    // While b holds it, the lock is live, and nobody takes it over.
    expect(() => DirLock.acquire(dir, 'test')).toThrow(expect.objectContaining({ code: 'DIR_LOCKED' }));
    b.release();
    expect(await readdir(dir)).toEqual([]);
    fault('stale lock (dead pid / reused pid)', 'taken over', 'taken over; a live lock is refused');
  });

  it('`mcprl train` takes over a dead process\'s lock and removes the temporaries its kill left behind', async () => {
    const dir = path.join(work, 'runs', 'killed');
    await mkdir(path.join(dir, 'trajectories'), { recursive: true });
    await writeLock(dir, { pid: await deadPid(), start: '1', host: hostname(), since: '2026-01-01T00:00:00.000Z' });
    const strays = [path.join(dir, '.state.json.4242.3.tmp'), path.join(dir, '.metrics.jsonl.4242.7.tmp'), path.join(dir, 'trajectories', '.step-0002.jsonl.4242.9.tmp')];
    for (const f of strays) await writeFile(f, 'partial');
    await writeFile(path.join(dir, 'notes.txt'), 'the user\'s own file');
    const r = await train(['--model', MODEL, '--scenarios', overlapping, '--run', 'killed']);
    // It got past the lock (the stale one was taken over) and failed on the scenarios, as it should.
    expect(r.stderr).toMatch(/SCENARIO_OVERLAP|overlap/);
    expect(r.stderr).not.toMatch(/in use/);
    for (const f of strays) expect(existsSync(f), f).toBe(false);
    expect(readFileSync(path.join(dir, 'notes.txt'), 'utf8')).toBe('the user\'s own file');
    expect(existsSync(lockFile(dir))).toBe(false);
    fault('kill -9 leaves .*.tmp files', 'removed at the next start', `${strays.length} removed, other files kept`);
  });

  it('`mcprl mcp` sees a run whose lock is held as running, and as not running once it is released', async () => {
    const ws = new Workspace(path.join(work, 'ws'));
    const dir = path.join(ws.root, 'cli-run');
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'config.json'), JSON.stringify({ maxSteps: 3 }));
    const jobs = new TrainingJobs(ws, new SafetyPolicy());
    const held = DirLock.acquire(dir, 'test');
    try {
      expect((await jobs.status('cli-run')).status).toBe('starting');
    } finally {
      held.release();
    }
    expect((await jobs.status('cli-run')).status).toBe('incomplete');
    // A lock whose holder died does not make the run look alive.
    await writeLock(dir, { pid: await deadPid(), start: '1', host: hostname(), since: '2026-01-01T00:00:00.000Z' });
    expect((await jobs.status('cli-run')).status).toBe('incomplete');
    fault('`mcprl mcp` job detection', 'from the run lock', 'held → starting; released or stale → incomplete');
  });
});

describe('a train that fails before step 0', () => {
  it('leaves no folder behind when it wrote nothing worth keeping, so a plain rerun is not blocked', async () => {
    const r = await train(['--model', MODEL, '--scenarios', overlapping, '--run', 'early']);
    expect(r.code).toBe(1);
    expect(existsSync(path.join(work, 'runs', 'early'))).toBe(false);
    fault('train fails before config.json', 'no folder left', existsSync(path.join(work, 'runs', 'early')) ? 'folder left' : 'no folder left');
  });

  it('says how to reuse the folder when it holds the run\'s config and scenarios', async () => {
    const broken = path.join(work, 'broken-model');
    await cp(MODEL, broken, { recursive: true });
    await rm(path.join(broken, 'model.safetensors'));
    const r = await train(['--model', broken, '--scenarios', scenarios, '--run', 'unloadable']);
    expect(r.code).toBe(1);
    const dir = path.join(work, 'runs', 'unloadable');
    expect(existsSync(path.join(dir, 'config.json'))).toBe(true);
    expect(r.stderr).toContain(`rerun with --run unloadable --resume`);
    fault('train fails before step 0 (model unloadable)', 'error says how to reuse the folder', 'says `--run NAME --resume`');
  });
});
