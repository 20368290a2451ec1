/**
 * Issue 42 §4: two `mcprl backend` on one `--dir` both took steps of the same model and one was lost. The folder is
 * locked as `mcprl train` locks its run folder: the second refuses at start, naming the holder, and the folder is
 * free again once the first has stopped. The real CLI as child processes; each waits for the other's event (the
 * first's "listening" line, its exit), never for a timer.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { readLockOwner } from '../../src/util/dir-lock.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { ENTRY } from './cli.js';
import { fault } from './fault-table.js';

/** How a backend child started: it listened (and runs on), or it exited first. */
type Started = { listening: true; child: ChildProcess; url: string } | { listening: false; code: number | null; stderr: string };

function startBackend(dir: string): Promise<Started> {
  const child = spawn(process.execPath, ['--import', 'tsx', ENTRY, 'backend', '--dir', dir, '--port', '0', '--quiet'], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => {
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
      const url = /listening on (\S+)/.exec(stdout)?.[1];
      if (url) resolve({ listening: true, child, url });
    });
    child.once('exit', (code) => resolve({ listening: false, code, stderr }));
  });
}

function stop(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve(child.exitCode);
    child.once('exit', (code) => resolve(code));
    child.kill('SIGTERM');
  });
}

const children: ChildProcess[] = [];
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'mcprl-backend-lock-'));
});
afterEach(async () => {
  for (const c of children.splice(0)) await stop(c);
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('one mcprl backend per --dir', () => {
  it('a second backend on the same folder refuses at start, naming the first; the folder is free once the first stops', async () => {
    const first = await startBackend(dir);
    expect(first.listening, first.listening ? '' : first.stderr).toBe(true);
    if (!first.listening) return;

    const second = await startBackend(dir);
    expect(second.listening, 'the second backend started on a folder the first holds').toBe(false);
    if (second.listening) return;
    expect(second.code).toBe(1);
    expect(second.stderr).toMatch(/^mcprl backend: DIR_LOCKED: .* is in use by another mcprl backend process: pid \d+/);
    expect(second.stderr).toContain(`pid ${first.child.pid} `);
    // The refusal left the holder's lock as it was.
    expect(readLockOwner(dir)?.pid).toBe(first.child.pid);

    expect(await stop(first.child)).toBe(0);
    const third = await startBackend(dir);
    expect(third.listening, third.listening ? '' : third.stderr).toBe(true);
    if (third.listening) expect(readLockOwner(dir)?.pid).toBe(third.child.pid);
    fault('two mcprl backend on one --dir', 'the second refuses at start naming the holder; the folder is free once the first stops',
      `second exited 1: ${second.stderr.trim().replace(/\/tmp\/\S+/, '<dir>')}`);
  }, 120_000);

  it('a project named after the lock file is refused as such (400), not a failure to make its folder', async () => {
    const own = path.join(dir, 'own');
    const b = await startBackend(own);
    expect(b.listening, b.listening ? '' : b.stderr).toBe(true);
    if (!b.listening) return;
    const res = await fetch(`${b.url}/backend/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ settings: { project: 'lock', name: 'm', baseModel: path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop') } }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { field: string } }).error.field).toBe('settings.project');
  }, 120_000);
});
