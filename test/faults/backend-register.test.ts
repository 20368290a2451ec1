/**
 * Issue 42 §4: a register that failed (LoRA rank 100000) left `model.json` behind, and every later register of the
 * name was refused (409) until it was deleted by hand. Nothing is written until the model has loaded: the failed
 * register leaves no folder, and the next one, with settings that work, registers. Rank 100000 is now refused by the
 * settings' schema before anything runs; the engine's own refusal (a LoRA target the model does not have, which the
 * schema lets through) is the register that fails after the base model has loaded. The real engine on the bundled
 * tiny model.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalBackend, TrainableModel } from '../../src/index.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
let dir: string;
let backend: LocalBackend;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'mcprl-register-'));
  backend = new LocalBackend({ dir });
});
afterAll(async () => {
  await backend?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('a register that fails', () => {
  it('writes nothing, and the next register of the name (settings that work) succeeds', async () => {
    expect(() => new TrainableModel({ project: 'p', name: 'm', baseModel: MODEL, lora: { rank: 100_000, alpha: 8, seed: 1 } })).toThrow(/settings\.lora\.rank/);
    const bad = new TrainableModel({ project: 'p', name: 'm', baseModel: MODEL, lora: { rank: 4, alpha: 8, seed: 1, targets: ['no_such_proj'] } });
    const err = await bad.register(backend).then(() => null, (e: unknown) => e as Error);
    expect(err?.message, 'a target the model lacks registered').toMatch(/unsupported LoRA target/);
    // Nothing of the failed registration is left: not the model's folder, not its project's.
    const left = await readdir(dir, { recursive: true });

    const good = new TrainableModel({ project: 'p', name: 'm', baseModel: MODEL, lora: { rank: 4, alpha: 8, seed: 1 } });
    const later = await good.register(backend).then(() => null, (e: unknown) => e as Error);
    expect(later?.message ?? null, 'the register after the failed one').toBeNull();
    expect(left).toEqual([]);
    expect(good.step).toBe(0);
    expect(existsSync(path.join(dir, 'p', 'm', 'model.json'))).toBe(true);
    expect(existsSync(path.join(dir, 'p', 'm', 'checkpoints', 'step-0000', 'adapter_model.safetensors'))).toBe(true);
    fault('register that the engine refuses (a LoRA target the model lacks), then one that works', 'the first fails writing nothing; the second registers',
      `first: ${err!.message.replace(/\s+/g, ' ').slice(0, 100)}; nothing left under the folder; second registered at step 0`);
  }, 120_000);
});
