/**
 * Merged HF folders and PEFT copies. The merged folder is judged by the project's PyTorch reference
 * (test/oracles/torch_ref.py, float64): the merged model alone must give the same per-token logprobs as the
 * base model with the adapter applied unmerged, max |Δlogprob| ≤ 1e-4 over every position (f32 merge: the gap
 * is one f32 rounding of each merged weight, about 1e-6 here).
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, type RandomModelOptions } from '../scripts/random-model.js';
import { readSafetensors, writeSafetensors } from '../src/hf/safetensors.js';
import { ExportError } from '../src/export/errors.js';
import { readModelConfig } from '../src/export/hf-folder.js';
import { mergeAdapter } from '../src/export/merge.js';
import { exportPeft, readAdapter } from '../src/export/peft.js';
import { maxAbsDiff, tokenIds } from './export-helpers.js';
import { requireOracle } from './helpers/oracles.js';
import { torchLogprobs } from './oracles/torch-oracle.js';

const TOLERANCE = 1e-4;
const QWEN3: RandomModelOptions = { arch: 'qwen3', vocabSize: 2048, shards: 2, seed: 11 };
const LLAMA_BF16: RandomModelOptions = { arch: 'llama', vocabSize: 2048, dtype: 'BF16', tieWordEmbeddings: false, seed: 12 };

let scratch: string;
const dirs = {
  qwen3: '', qwen3Adapter: '', qwen3Merged: '',
  llama: '', llamaAdapter: '', llamaMergedF32: '', llamaMergedKeep: '',
};
const ids = tokenIds(2, 10, 2048, 77);
let ref: number[][][];

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'mcprl-export-merge-'));
  for (const k of Object.keys(dirs) as (keyof typeof dirs)[]) dirs[k] = join(scratch, k);
  await makeRandomModel(dirs.qwen3, QWEN3);
  await makeRandomAdapter(dirs.qwen3Adapter, QWEN3, { rank: 4, alpha: 8, seed: 13 });
  await makeRandomModel(dirs.llama, LLAMA_BF16);
  await makeRandomAdapter(dirs.llamaAdapter, LLAMA_BF16, { rank: 8, alpha: 4, useRslora: true, targetModules: ['q_proj', 'o_proj', 'down_proj'], seed: 14 });
  await mergeAdapter({ modelDir: dirs.qwen3, adapterDir: dirs.qwen3Adapter, out: dirs.qwen3Merged });
  await mergeAdapter({ modelDir: dirs.llama, adapterDir: dirs.llamaAdapter, out: dirs.llamaMergedF32, dtype: 'F32' });
  await mergeAdapter({ modelDir: dirs.llama, adapterDir: dirs.llamaAdapter, out: dirs.llamaMergedKeep });
  if (!requireOracle('torch')) return;
  const job = (model: string, adapter: string | null) => ({ model, adapter, sequences: ids });
  ref = torchLogprobs([
    job(dirs.qwen3, dirs.qwen3Adapter),
    job(dirs.qwen3Merged, null),
    job(dirs.llama, dirs.llamaAdapter),
    job(dirs.llamaMergedF32, null),
    job(dirs.llama, null),
  ], scratch);
}, 120_000);

afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

describe('merged HF folder', () => {
  it('qwen3 (2 shards, f32): merged model = base + adapter in the PyTorch reference (≤ 1e-4)', (ctx) => {
    requireOracle('torch', ctx);
    expect(maxAbsDiff(ref[1], ref[0])).toBeLessThanOrEqual(TOLERANCE);
  });

  it('llama (bf16, untied, rslora on q/o/down) merged as f32: same logprobs as base + adapter (≤ 1e-4)', (ctx) => {
    requireOracle('torch', ctx);
    expect(maxAbsDiff(ref[3], ref[2])).toBeLessThanOrEqual(TOLERANCE);
    // And the adapter really changes the model, so the comparisons above can fail.
    expect(maxAbsDiff(ref[4], ref[2])).toBeGreaterThan(100 * TOLERANCE);
  });

  it('is a standard HF folder: same weight files and index, config, tokenizer and generation files copied', async () => {
    const files = (await readdir(dirs.qwen3Merged)).sort();
    expect(files).toEqual((await readdir(dirs.qwen3)).sort());
    expect(files).toEqual(expect.arrayContaining(['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'model.safetensors.index.json']));
    expect(await readFile(join(dirs.qwen3Merged, 'tokenizer.json'), 'utf8')).toBe(await readFile(join(dirs.qwen3, 'tokenizer.json'), 'utf8'));
    const index = JSON.parse(await readFile(join(dirs.qwen3Merged, 'model.safetensors.index.json'), 'utf8'));
    expect(index.weight_map).toEqual(JSON.parse(await readFile(join(dirs.qwen3, 'model.safetensors.index.json'), 'utf8')).weight_map);
    expect((await readModelConfig(dirs.qwen3Merged)).spec).toEqual((await readModelConfig(dirs.qwen3)).spec);
  });

  it("dtype 'keep' keeps bf16: untouched tensors byte-identical, adapted ones changed; 'F32' rewrites config torch_dtype", async () => {
    const base = (await readSafetensors(join(dirs.llama, 'model.safetensors'))).tensors;
    const keep = (await readSafetensors(join(dirs.llamaMergedKeep, 'model.safetensors'))).tensors;
    const f32 = (await readSafetensors(join(dirs.llamaMergedF32, 'model.safetensors'))).tensors;
    expect([...keep.keys()]).toEqual([...base.keys()]);
    let changed = 0;
    for (const [name, t] of keep) {
      expect(t.dtype).toBe('BF16');
      expect(f32.get(name)!.dtype).toBe('F32');
      const adapted = /\.(q_proj|o_proj|down_proj)\.weight$/.test(name);
      if (adapted) {
        expect(Buffer.compare(t.data, base.get(name)!.data)).not.toBe(0);
        changed++;
      } else {
        expect(Buffer.compare(t.data, base.get(name)!.data)).toBe(0);
      }
    }
    expect(changed).toBe(3 * 2);
    expect(JSON.parse(await readFile(join(dirs.llamaMergedKeep, 'config.json'), 'utf8')).torch_dtype).toBe('bfloat16');
    expect(JSON.parse(await readFile(join(dirs.llamaMergedF32, 'config.json'), 'utf8')).torch_dtype).toBe('float32');
  });

  it('refuses to overwrite a non-empty output folder unless asked, and leaves no partial folder behind', async () => {
    await expect(mergeAdapter({ modelDir: dirs.qwen3, adapterDir: dirs.qwen3Adapter, out: dirs.qwen3Merged })).rejects.toMatchObject({ code: 'OUTPUT_EXISTS' });
    await mergeAdapter({ modelDir: dirs.qwen3, adapterDir: dirs.qwen3Adapter, out: dirs.qwen3Merged, overwrite: true });
    const bad = join(scratch, 'merged-from-wrong-adapter');
    await expect(mergeAdapter({ modelDir: dirs.qwen3, adapterDir: dirs.llamaAdapter, out: bad })).rejects.toBeInstanceOf(ExportError);
    expect(existsSync(bad)).toBe(false);
    expect((await readdir(scratch)).filter((f) => f.includes('.partial-'))).toEqual([]);
  });
});

describe('PEFT adapter', () => {
  it('is copied byte for byte after validation', async () => {
    const out = join(scratch, 'peft-out');
    const { spec } = await readModelConfig(dirs.qwen3);
    const r = await exportPeft({ adapterDir: dirs.qwen3Adapter, spec, out });
    expect(r.pairs).toBe(2 * 7);
    for (const f of ['adapter_config.json', 'adapter_model.safetensors']) {
      expect(Buffer.compare(await readFile(join(out, f)), await readFile(join(dirs.qwen3Adapter, f)))).toBe(0);
    }
  });

  it('is rejected, naming file and key, when it does not fit the model or is not plain LoRA', async () => {
    const { spec } = await readModelConfig(dirs.qwen3);
    // An adapter made for the llama model (hidden 64, head_dim 16 on 4 heads) has the wrong q_proj shapes here.
    await expect(readAdapter(dirs.llamaAdapter, spec)).rejects.toThrow(/adapter_model\.safetensors: tensor base_model\.model\.model\.layers\.0\.self_attn\.q_proj\.lora_B\.weight has shape \[64,8\]/);

    const broken = join(scratch, 'broken-adapter');
    await makeRandomAdapter(broken, QWEN3, { targetModules: ['q_proj'] });
    const file = join(broken, 'adapter_model.safetensors');
    const { tensors } = await readSafetensors(file);
    tensors.delete('base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight');
    await writeSafetensors(file, tensors);
    await expect(readAdapter(broken, spec)).rejects.toThrow(/tensor base_model\.model\.model\.layers\.1\.self_attn\.q_proj\.lora_B\.weight is missing/);

    tensors.set('base_model.model.model.embed_tokens.lora_embedding_A', tensors.get('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')!);
    await writeSafetensors(file, tensors);
    await expect(readAdapter(broken, spec)).rejects.toThrow(/tensor base_model\.model\.model\.embed_tokens\.lora_embedding_A is not a LoRA weight/);

    const cfgFile = join(broken, 'adapter_config.json');
    const cfg = JSON.parse(await readFile(cfgFile, 'utf8'));
    await writeFile(cfgFile, JSON.stringify({ ...cfg, use_dora: true }));
    await expect(readAdapter(broken, spec)).rejects.toMatchObject({ code: 'BAD_ADAPTER', message: expect.stringMatching(/adapter_config\.json: use_dora: true \(DoRA\) is not supported/) });
    // The one reader of adapter_config.json (src/hf/peft.ts) is behind it: a file that is not JSON, or absent.
    await writeFile(cfgFile, '{"peft_type": "LORA",');
    await expect(readAdapter(broken, spec)).rejects.toMatchObject({ code: 'BAD_CONFIG', message: expect.stringContaining(`${cfgFile}: not valid JSON`) });
    await rm(cfgFile);
    await expect(readAdapter(broken, spec)).rejects.toMatchObject({ code: 'MISSING_FILE', message: `${cfgFile}: file does not exist` });
  });
});
