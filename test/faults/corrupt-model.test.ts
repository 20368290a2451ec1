/**
 * §2 of issue 12, corrupt model folders: every integer of config.json is range-checked when it is read (an error
 * naming the field and its value), and a NaN or Inf in the weights or in an adapter is refused when loaded,
 * naming the tensor. Real parts: the bundled tiny model, copied and damaged by hand, and the real engine.
 */
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Model } from '../../src/engine/model.js';
import { HfConfigSchema, readModelConfig } from '../../src/hf/config.js';
import { adapterLayout, modelDims, writePeftAdapter, type LoraMatrix } from '../../src/hf/peft.js';
import { readSafetensors, serializeSafetensors } from '../../src/hf/safetensors.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
let work: string;
let n = 0;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-corrupt-'));
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

async function copyModel(): Promise<string> {
  const dir = path.join(work, `m${n++}`);
  await cp(MODEL, dir, { recursive: true });
  return dir;
}

async function loadError(dir: string, adapter?: string): Promise<Error & { code?: string }> {
  const m = await Model.load(dir, { threads: 1 }).catch((e: Error) => e);
  if (m instanceof Error) return m;
  try {
    if (adapter) await m.loadAdapter('a', adapter);
  } catch (e) {
    return e as Error;
  } finally {
    m.close();
  }
  throw new Error(`loading ${dir} succeeded`);
}

describe('config.json integers', () => {
  it('max_position_embeddings: 1e12 fails on load, naming the field and its value', async () => {
    const dir = await copyModel();
    const config = JSON.parse(await readFile(path.join(dir, 'config.json'), 'utf8'));
    await writeFile(path.join(dir, 'config.json'), JSON.stringify({ ...config, max_position_embeddings: 1e12 }));
    const err = await loadError(dir);
    expect(err.message).toContain('max_position_embeddings 1000000000000');
    expect(err.message).toContain(path.join(dir, 'config.json'));
    fault('config.json max_position_embeddings: 1e12', 'load fails naming the field', err.message.slice(err.message.indexOf('max_position')).slice(0, 60));
  });

  it('every integer field of config.json has a range: 1e12 in any of them names that field', async () => {
    const dir = await copyModel();
    const config = JSON.parse(await readFile(path.join(dir, 'config.json'), 'utf8'));
    // The schema's integer fields: those that take 2 and refuse 1.5.
    const shape = HfConfigSchema.shape as Record<string, { safeParse(v: unknown): { success: boolean } }>;
    const ints = Object.keys(shape).filter((k) => config[k] !== undefined && shape[k].safeParse(2).success && !shape[k].safeParse(1.5).success);
    expect(ints.length).toBeGreaterThanOrEqual(8);
    for (const field of ints) {
      await writeFile(path.join(dir, 'config.json'), JSON.stringify({ ...config, [field]: 1e12 }));
      await expect(readModelConfig(dir), field).rejects.toThrow(`${field} 1000000000000`);
    }
    fault('any config.json integer out of range', 'error names the field', `${ints.length} fields checked`);
  });
});

describe('non-finite weights', () => {
  it('a NaN in the base weights is refused on load, naming the file and the tensor', async () => {
    const dir = await copyModel();
    const file = path.join(dir, 'model.safetensors');
    const { tensors, metadata } = await readSafetensors(file);
    const name = 'model.layers.2.mlp.down_proj.weight';
    const t = tensors.get(name)!;
    expect(t.dtype).toBe('F32');
    new DataView(t.data.buffer, t.data.byteOffset, t.data.byteLength).setFloat32(4 * 17, NaN, true);
    await writeFile(file, serializeSafetensors(tensors, metadata));
    const err = await loadError(dir);
    expect(err.message).toMatch(new RegExp(`model\\.safetensors: tensor '${name.replace(/\./g, '\\.')}' holds NaN at element 17`));
    fault('NaN in base weights', 'load fails naming the tensor', `'${name}' holds NaN`);
  });

  it('an Inf in an adapter is refused when the adapter is loaded, naming the tensor', async () => {
    const { spec } = await readModelConfig(MODEL);
    const layout = adapterLayout(modelDims(spec), 4, ['q_proj', 'v_proj']);
    const tensors = new Map<string, LoraMatrix>(layout.map(({ key, shape }) => [key, { shape, data: new Float32Array(shape[0] * shape[1]).fill(0.01) }]));
    const bad = layout[3].key;
    tensors.get(bad)!.data[5] = Infinity;
    const adapter = path.join(work, 'adapter');
    await writePeftAdapter(adapter, { config: { peft_type: 'LORA', r: 4, lora_alpha: 8, target_modules: ['q_proj', 'v_proj'], base_model_name_or_path: MODEL } as never, tensors });
    const err = await loadError(MODEL, adapter);
    expect(err.message).toContain(`tensor '${bad}' holds Inf at element 5`);
    fault('Inf in an adapter', 'adapter load fails naming the tensor', `'${bad}' holds Inf`);
  });
});
