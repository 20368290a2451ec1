/**
 * `model.train(groups)` through `mcprl backend` (the server in this process, reached over real HTTP by a
 * RemoteBackend): the step's progress is streamed as NDJSON while it runs, the plain JSON answer still works, and a
 * client that goes away after the first streamed event leaves the model whole: the step completes on the server,
 * its checkpoint is a complete PEFT adapter, and the next register and train continue from it.
 *
 * Nothing here waits on time: the test learns that the abandoned step has ended from the server itself (a
 * register waits for a step in flight).
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BackendError,
  readPeftAdapter,
  RemoteBackend,
  startBackendServer,
  StepStreamLineSchema,
  TrainableModel,
  TrainResultSchema,
  type ProgressEvent,
  type RunningBackendServer,
  type TrajectoryGroupInput,
} from '../src/index.js';
import { probe, TINY_MODEL } from './backend-helpers.js';

const TOKEN = 'stream-token-1234';
const SETTINGS = { project: 'stream', name: 'picker', baseModel: TINY_MODEL, lora: { rank: 4, alpha: 8, seed: 3 } };

/** Two groups with a reward signal: in each, one reply is rewarded and the other is not. */
function groups(rewards: [number, number] = [1, 0]): TrajectoryGroupInput[] {
  return ['Pick a cell from 1 to 9.', 'Free cells: 2, 5. Pick one.'].map((task) => ({
    trajectories: ['5', '2'].map((reply, i) => ({
      messages: [
        { role: 'user' as const, content: task },
        { role: 'assistant' as const, content: reply },
      ],
      reward: rewards[i],
    })),
  }));
}

describe('train through mcprl backend, streamed', () => {
  let dir: string;
  let server: RunningBackendServer;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mcprl-backend-stream-'));
    server = await startBackendServer({ dir: join(dir, 'store'), port: 0, token: TOKEN });
  });
  afterAll(async () => {
    await server?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('streams the step\'s progress to onProgress, then resolves with its result', async () => {
    const model = new TrainableModel(SETTINGS);
    await model.register(new RemoteBackend(server.url, TOKEN));
    expect(model.step).toBe(0);
    const events: ProgressEvent[] = [];
    const r = await model.train(groups(), { lr: 1e-2 }, { onProgress: (e) => events.push(e) });
    expect(r.trained).toBe(true);
    expect(r.step).toBe(1);
    expect(model.step).toBe(1);
    expect(events.map((e) => [e.phase, e.step, e.done, e.total])).toEqual([
      ['score', 1, 0, 2],
      ['score', 1, 2, 2],
      ['train', 1, 0, r.sequences],
      ['train', 1, r.sequences, r.sequences],
      ['checkpoint', 1, 0, 1],
      ['checkpoint', 1, 1, 1],
    ]);
  });

  it('answers plain JSON to a client that does not ask for the stream, and refuses bad steps with their status', async () => {
    const post = (body: unknown, accept?: string) =>
      fetch(`${server.url}/backend/train`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}`, ...(accept ? { accept } : {}) },
        body: JSON.stringify(body),
      });
    // Equal rewards: no signal, so the step trains nothing (and the model stays at step 1).
    const plain = await post({ model: { project: 'stream', name: 'picker' }, groups: groups([1, 1]) });
    expect(plain.status).toBe(200);
    expect(plain.headers.get('content-type')).toMatch(/^application\/json/);
    const result = TrainResultSchema.parse(await plain.json());
    expect(result).toMatchObject({ trained: false, step: 1, droppedGroups: 2 });

    // The same call streamed: the score phase, then the result line.
    const streamed = await post({ model: { project: 'stream', name: 'picker' }, groups: groups([1, 1]) }, 'application/x-ndjson');
    expect(streamed.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
    const lines = (await streamed.text()).trim().split('\n').map((l) => StepStreamLineSchema.parse(JSON.parse(l)));
    expect(lines.map((l) => l.type)).toEqual(['progress', 'progress', 'result']);
    expect(lines[2]).toEqual({ type: 'result', result });

    // Refused before the step begins: its status and code, streamed or not.
    const bad = await post({ model: { project: 'stream', name: 'picker' }, groups: [{ trajectories: [] }] }, 'application/x-ndjson');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string; field: string } }).error).toMatchObject({ code: 'BACKEND_INVALID', field: 'groups.0.trajectories' });
    const model = new TrainableModel(SETTINGS);
    await model.register(new RemoteBackend(server.url, TOKEN));
    const err = await model.train(groups(), {}, { onProgress: () => undefined }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeNull();
    expect(model.step).toBe(2);
  });

  it('a client that disconnects after the first streamed event leaves the step whole, and the next register and train continue from it', async () => {
    const model = new TrainableModel(SETTINGS);
    await model.register(new RemoteBackend(server.url, TOKEN));
    const before = model.step;
    const controller = new AbortController();
    const seen: ProgressEvent[] = [];
    const err = await model
      .train(groups(), { lr: 1e-2 }, {
        signal: controller.signal,
        onProgress: (e) => {
          seen.push(e);
          controller.abort();
        },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect((err as BackendError).code).toBe('BACKEND_ABORTED');
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ phase: 'score', step: before + 1, done: 0 });
    // The client never learnt the step's outcome.
    expect(model.step).toBe(before);

    // A register waits for the step in flight: the server completed it.
    const again = new TrainableModel(SETTINGS);
    await again.register(new RemoteBackend(server.url, TOKEN));
    expect(again.step).toBe(before + 1);

    // Its checkpoint is a complete PEFT adapter (with optimiser state), no half-written folder is left beside it,
    // and its numbers are recorded once.
    const checkpoints = await again.checkpoints();
    expect(checkpoints.map((c) => c.step)).toEqual(Array.from({ length: before + 2 }, (_, i) => i));
    const latest = checkpoints[checkpoints.length - 1];
    const adapter = await readPeftAdapter(latest.dir);
    expect(adapter.config.r).toBe(4);
    expect(adapter.config.peft_type).toBe('LORA');
    expect(adapter.tensors.size).toBeGreaterThan(0);
    expect(existsSync(join(latest.dir, 'optimizer.safetensors'))).toBe(true);
    const entries = await readdir(join(dir, 'store', 'stream', 'picker', 'checkpoints'));
    expect(entries.sort()).toEqual(checkpoints.map((c) => `step-${String(c.step).padStart(4, '0')}`));
    const rows = (await readFile(join(dir, 'store', 'stream', 'picker', 'train-results.jsonl'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as { step: number });
    expect(rows.map((r) => r.step)).toEqual(Array.from({ length: before + 1 }, (_, i) => i + 1));

    // The server serves that step's adapter and trains on from it.
    expect((await probe(again)).adapter).toBe(`picker@step-${before + 1}`);
    const next = await again.train(groups(), { lr: 1e-2 });
    expect(next).toMatchObject({ trained: true, step: before + 2 });
    expect((await probe(again)).adapter).toBe(`picker@step-${before + 2}`);
  });
});
