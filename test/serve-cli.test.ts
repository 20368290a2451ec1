/**
 * `mcprl serve` as a user runs it: a child process started from the CLI entry point, answering HTTP until
 * it gets SIGTERM, and refusing bad flags with a one-line error.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exited, listeningUrl, runCli } from './helpers/cli.js';
import { makeRandomAdapter, makeRandomModel } from '../scripts/random-model.js';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-serve-cli-'));
  await makeRandomModel(join(dir, 'tiny'), { arch: 'qwen3', seed: 2 });
  await makeRandomAdapter(join(dir, 'step-0003'), { arch: 'qwen3' }, { seed: 4 });
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('mcprl serve (CLI)', () => {
  it('serves the model and its adapters until SIGTERM', async () => {
    const child = runCli(['serve', '--model', join(dir, 'tiny'), '--adapter', join(dir, 'step-0003'), '--adapter', `best=${join(dir, 'step-0003')}`, '--port', '0']);
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
      // vLLM's runtime adapter endpoints are on by default: load one more, unload one given at startup.
      const post = (path: string, b: unknown) => fetch(`${url}/${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
      expect((await post('load_lora_adapter', { lora_name: 'policy-step-1', lora_path: join(dir, 'step-0003') })).status).toBe(200);
      expect((await post('unload_lora_adapter', { lora_name: 'best' })).status).toBe(200);
      const after = (await (await fetch(`${url}/models`)).json()) as { data: { id: string }[] };
      expect(after.data.map((m) => m.id)).toEqual(['tiny', 'step-0003', 'policy-step-1']);
      const metrics = await (await fetch(url.replace(/\/v1$/, '/metrics'))).text();
      expect(metrics).toMatch(/^mcprl_lora_adapters 2$/m);
    } finally {
      child.kill('SIGTERM');
    }
    const { code, stderr } = await done;
    expect(code).toBe(0);
    // One log line per request.
    expect(stderr).toMatch(/POST \/v1\/chat\/completions 200/);
  });

  it('refuses runtime adapter updates with --no-lora-updating', async () => {
    const child = runCli(['serve', '--model', join(dir, 'tiny'), '--no-lora-updating', '--port', '0', '--quiet']);
    const done = exited(child);
    try {
      const url = await listeningUrl(child);
      const res = await fetch(`${url}/load_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'x', lora_path: join(dir, 'step-0003') }) });
      expect(res.status).toBe(404);
      const models = (await (await fetch(`${url}/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual(['tiny']);
    } finally {
      child.kill('SIGTERM');
    }
    expect((await done).code).toBe(0);
  });

  it('fails with one line on stderr for a missing model folder and for a bad port', async () => {
    const missing = await exited(runCli(['serve', '--model', join(dir, 'nope'), '--port', '0']));
    expect(missing.code).toBe(1);
    expect(missing.stderr.trim().split('\n')).toHaveLength(1);
    expect(missing.stderr).toMatch(/^mcprl serve: .*nope/);

    const badPort = await exited(runCli(['serve', '--model', join(dir, 'tiny'), '--port', 'eighty']));
    expect(badPort.code).toBe(1);
    expect(badPort.stderr).toMatch(/--port <port>.*'eighty' is invalid\. expected an integer from 0 to 65535/);
  });
});
