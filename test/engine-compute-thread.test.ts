/**
 * Every asynchronous native task of the process runs on one compute thread (native/addon/napi_util.cc), so the process
 * has one OpenMP team whatever libuv thread queued the task. Tasks of two engines in flight together, one of them
 * failing, all settle as they would one at a time: the failure rejects its own promise only, and the thread goes
 * on with the next task.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomModel } from '../scripts/random-model.js';
import { Model, type GenerateRequest } from '../src/engine/model.js';
import { loadNative } from '../src/engine/native.js';

const root = mkdtempSync(join(tmpdir(), 'mcprl-compute-thread-'));
let a: Model;
let b: Model;

beforeAll(async () => {
  await makeRandomModel(join(root, 'a'), { arch: 'qwen3', seed: 3, vocabSize: 256, tokenizer: false });
  await makeRandomModel(join(root, 'b'), { arch: 'qwen3', seed: 4, vocabSize: 256, tokenizer: false });
  // A folder whose config reads but whose weights are missing: the native load fails.
  mkdirSync(join(root, 'broken'));
  copyFileSync(join(root, 'a', 'config.json'), join(root, 'broken', 'config.json'));
  a = await Model.load(join(root, 'a'));
  b = await Model.load(join(root, 'b'));
});
afterAll(() => {
  a.close();
  b.close();
  rmSync(root, { recursive: true, force: true });
});

const request = (seed: number): GenerateRequest => ({ promptIds: [5, 9, 17, 33, 2, 8], n: 2, sampling: { maxTokens: 12, temperature: 1, seed } });
const tokens = (xs: { tokenIds: number[] }[]) => xs.map((x) => x.tokenIds);

describe('the compute thread', () => {
  it('runs the tasks of two engines in flight together, a failing one among them, as it runs them one by one', async () => {
    const alone = [tokens(await a.generate(request(1))), tokens(await b.generate(request(2))), await a.score([[5, 9, 17, 33]])];
    const together = await Promise.allSettled([
      a.generate(request(1)),
      Model.load(join(root, 'broken')),
      b.generate(request(2)),
      a.score([[5, 9, 17, 33]]),
    ]);
    expect(together.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect((together[1] as PromiseRejectedResult).reason.message).toMatch(/safetensors/);
    const values = together.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    expect([tokens(values[0] as { tokenIds: number[] }[]), tokens(values[1] as { tokenIds: number[] }[]), values[2]]).toEqual(alone);
    expect(tokens(await b.generate(request(2)))).toEqual(alone[1]);
    expect(loadNative().info().taskThreads).toBe(1);
  });
});
