/**
 * `mcprl backend` as a user runs it: a child process started from the CLI entry point, driven by a
 * RemoteBackend over real HTTP, training the tic-tac-toe example for two steps.
 */
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exited, listeningUrl, runCli } from './helpers/cli.js';
import { BackendError, readPeftAdapter, RemoteBackend, TrainableModel } from '../src/index.js';
import { gatherGames, probe, sameAnswer, TINY_MODEL, type Probe } from './backend-helpers.js';

const TOKEN = 'test-token-1234';

describe('mcprl backend with RemoteBackend', () => {
  let dir: string;
  let child: ChildProcessWithoutNullStreams;
  let done: Promise<{ code: number | null; stderr: string }>;
  let url: string;
  let trained: Probe;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mcprl-backend-cli-'));
    child = runCli(['backend', '--dir', join(dir, 'store'), '--port', '0', '--token', TOKEN, '--quiet']);
    done = exited(child);
    url = await listeningUrl(child);
  });
  afterAll(async () => {
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await done;
    }
    await rm(dir, { recursive: true, force: true });
  });

  it('trains the example for two steps through the server', async () => {
    const model = new TrainableModel({ project: 'remote', name: 'ttt', baseModel: TINY_MODEL, lora: { rank: 4, alpha: 8, seed: 2 } });
    await model.register(new RemoteBackend(url, TOKEN));
    expect(model.step).toBe(0);
    expect(model.baseURL).toBe(`${url}/v1`);
    const before = await probe(model);
    expect(before.adapter).toBe('ttt@step-0');
    for (let round = 1; round <= 2; round++) {
      const r = await model.train(await gatherGames(model, round), { lr: 1e-2 });
      expect(r.trained).toBe(true);
      expect(r.step).toBe(round);
      expect(r.retokenizedTurns).toBe(0);
      expect(Number.isFinite(r.loss)).toBe(true);
    }
    expect(model.step).toBe(2);
    const after = await probe(model);
    expect(after.adapter).toBe('ttt@step-2');
    expect(sameAnswer(before, after)).toBe(false);
    trained = after;
    // Everything the server wrote is under its --dir.
    const checkpoints = await model.checkpoints();
    expect(checkpoints.map((c) => c.step)).toEqual([0, 1, 2]);
    for (const c of checkpoints) expect(c.dir.startsWith(join(dir, 'store', 'remote', 'ttt'))).toBe(true);
    expect((await readPeftAdapter(checkpoints[2].dir)).config.r).toBe(4);
    expect(checkpoints[2].metrics.step).toBe(2);
    const merged = await model.export({ format: 'merged' });
    expect(merged.dir).toBe(join(dir, 'store', 'remote', 'ttt', 'exports', 'merged-step-0002'));
    expect(existsSync(join(merged.dir, 'model.safetensors'))).toBe(true);
  });

  it('answers errors with their code and field, and wants the token', async () => {
    const model = new TrainableModel({ project: 'remote', name: 'ttt', baseModel: TINY_MODEL, lora: { rank: 4, alpha: 8, seed: 2 } });
    await model.register(new RemoteBackend(url, TOKEN));
    const err = await model.train([{ trajectories: [] }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect((err as BackendError).code).toBe('BACKEND_INVALID');
    expect((err as BackendError).field).toBe('groups.0.trajectories');

    const wrong = await new TrainableModel({ project: 'remote', name: 'other', baseModel: TINY_MODEL }).register(new RemoteBackend(url, 'wrong')).catch((e: unknown) => e);
    expect((wrong as BackendError).status).toBe(401);
    const chat = await fetch(`${url}/v1/models`);
    expect(chat.status).toBe(401);
    const health = await fetch(`${url}/health`);
    expect(health.status).toBe(200);
  });

  it('resumes every model from its newest checkpoint after a restart', async () => {
    child.kill('SIGTERM');
    expect((await done).code).toBe(0);
    child = runCli(['backend', '--dir', join(dir, 'store'), '--port', '0', '--token', TOKEN, '--quiet']);
    done = exited(child);
    url = await listeningUrl(child);
    const model = new TrainableModel({ project: 'remote', name: 'ttt', baseModel: TINY_MODEL, lora: { rank: 4, alpha: 8, seed: 2 } });
    await model.register(new RemoteBackend(url, TOKEN));
    expect(model.step).toBe(2);
    const p = await probe(model);
    expect(p.adapter).toBe('ttt@step-2');
    expect(sameAnswer(p, trained)).toBe(true);
  });

  it('refuses to listen beyond loopback without a token', async () => {
    const c = runCli(['backend', '--dir', join(dir, 'open'), '--host', '0.0.0.0', '--port', '0']);
    const { code, stderr } = await exited(c);
    expect(code).toBe(1);
    expect(stderr).toMatch(/SERVER_CONFIG: refusing to bind mcprl backend to 0\.0\.0\.0 without a token/);
    expect(existsSync(join(dir, 'open'))).toBe(false);
  });
});
