/**
 * `mcprl serve` as a user runs it: a child process started from the CLI entry point, answering HTTP until
 * it gets SIGTERM, and refusing bad flags with a one-line error.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel } from '../scripts/random-model.js';

const ENTRY = join(import.meta.dirname, '..', 'src', 'cli', 'entry.ts');
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-serve-cli-'));
  await makeRandomModel(join(dir, 'tiny'), { arch: 'qwen3', seed: 2 });
  await makeRandomAdapter(join(dir, 'step-0003'), { arch: 'qwen3' }, { seed: 4 });
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

function run(args: string[]): ChildProcessWithoutNullStreams {
  return spawn(process.execPath, ['--import', 'tsx', ENTRY, ...args], { stdio: 'pipe' });
}

/** Resolves with the URL the server prints once it listens; rejects if it exits first. */
function listeningUrl(child: ChildProcessWithoutNullStreams): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (code) => reject(new Error(`mcprl serve exited with ${code}: ${err}`)));
  });
}

function exited(child: ChildProcessWithoutNullStreams): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stderr }));
  });
}

describe('mcprl serve (CLI)', () => {
  it('serves the model and its adapters until SIGTERM', async () => {
    const child = run(['serve', '--model', join(dir, 'tiny'), '--adapter', join(dir, 'step-0003'), '--adapter', `best=${join(dir, 'step-0003')}`, '--port', '0']);
    const done = exited(child);
    try {
      const url = await listeningUrl(child);
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
      const models = (await (await fetch(`${url}/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual(['tiny', 'step-0003', 'best']);
      const res = await fetch(`${url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'best', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, seed: 1 }),
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { choices: { mcprl_token_ids: number[] }[] };
      expect(body.choices[0].mcprl_token_ids.length).toBeGreaterThan(0);
    } finally {
      child.kill('SIGTERM');
    }
    const { code, stderr } = await done;
    expect(code).toBe(0);
    // One log line per request.
    expect(stderr).toMatch(/POST \/v1\/chat\/completions 200/);
  });

  it('fails with one line on stderr for a missing model folder and for a bad port', async () => {
    const missing = await exited(run(['serve', '--model', join(dir, 'nope'), '--port', '0']));
    expect(missing.code).toBe(1);
    expect(missing.stderr.trim().split('\n')).toHaveLength(1);
    expect(missing.stderr).toMatch(/^mcprl serve: .*nope/);

    const badPort = await exited(run(['serve', '--model', join(dir, 'tiny'), '--port', 'eighty']));
    expect(badPort.code).toBe(1);
    expect(badPort.stderr).toMatch(/--port <port>.*'eighty' is invalid\. expected an integer from 0 to 65535/);
  });
});
