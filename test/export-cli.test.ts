/**
 * `mcprl export` as a user runs it (a child process through the real CLI entry point), and the errors a broken
 * model folder produces: each names the file and, where there is one, the tensor.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, type RandomModelOptions } from '../scripts/random-model.js';
import { f32Tensor, readSafetensors, writeSafetensors } from '../src/hf/safetensors.js';
import { exportOnnx } from '../src/export/onnx.js';
import { REPO_ROOT } from './helpers/servers.js';

const run = promisify(execFile);
const ENTRY = join(REPO_ROOT, 'src', 'cli', 'entry.ts');
const MODEL: RandomModelOptions = { arch: 'qwen2', vocabSize: 1024, seed: 21 };

let scratch: string;
let model: string;
let adapter: string;

async function mcprl(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', ENTRY, ...args], { cwd: REPO_ROOT });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, stdout: err.stdout, stderr: err.stderr };
  }
}

/** A fresh copy of the random model, with `edit` applied to its model.safetensors tensors. */
async function brokenModel(name: string, edit: (t: Map<string, ReturnType<typeof f32Tensor>>) => void): Promise<string> {
  const dir = join(scratch, name);
  await makeRandomModel(dir, { ...MODEL, tokenizer: false });
  const file = join(dir, 'model.safetensors');
  const { tensors } = await readSafetensors(file);
  edit(tensors);
  await writeSafetensors(file, tensors);
  return dir;
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'mcprl-export-cli-'));
  model = join(scratch, 'model');
  adapter = join(scratch, 'adapter');
  await makeRandomModel(model, MODEL);
  await makeRandomAdapter(adapter, MODEL, { targetModules: ['k_proj', 'up_proj'] });
});

afterAll(async () => {
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

describe('mcprl export (CLI)', () => {
  it('writes an ONNX folder that onnxruntime-node loads, then refuses to overwrite it without --force', async () => {
    const out = join(scratch, 'onnx');
    const r = await mcprl(['export', '--model', model, '--adapter', adapter, '--format', 'onnx', '--out', out]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/onnx: ONNX opset 17, [\d.]+ MiB, adapter merged/);
    expect(existsSync(join(out, 'tokenizer.json'))).toBe(true);
    expect(JSON.parse(await readFile(join(out, 'onnx_config.json'), 'utf8')).merged_adapter).toBe(adapter);
    const session = await ort.InferenceSession.create(join(out, 'model.onnx'));
    expect(session.inputNames).toEqual(['input_ids']);
    expect(session.outputNames).toEqual(['logits']);
    await session.release();

    const again = await mcprl(['export', '--model', model, '--format', 'onnx', '--out', out]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^mcprl export: OUTPUT_EXISTS: .*onnx: output exists and is not an empty folder/);
    expect((await mcprl(['export', '--model', model, '--format', 'onnx', '--out', out, '--force'])).code).toBe(0);
  });

  it('writes peft and merged folders', async () => {
    const peft = await mcprl(['export', '--model', model, '--adapter', adapter, '--format', 'peft', '--out', join(scratch, 'peft')]);
    expect(peft.stdout).toMatch(/PEFT adapter with 4 LoRA pairs/);
    const merged = await mcprl(['export', '--model', model, '--adapter', adapter, '--format', 'merged', '--dtype', 'f32', '--out', join(scratch, 'merged')]);
    expect(merged.stdout).toMatch(/qwen2 HF folder, 4 weights merged, dtype F32/);
    expect(existsSync(join(scratch, 'merged', 'model.safetensors'))).toBe(true);
  });

  it('fails on one line of stderr with exit code 1', async () => {
    const noAdapter = await mcprl(['export', '--model', model, '--format', 'merged', '--out', join(scratch, 'x')]);
    expect(noAdapter.code).toBe(1);
    expect(noAdapter.stderr).toBe('mcprl export: BAD_ADAPTER: format merged needs an adapter folder\n');
    const badFormat = await mcprl(['export', '--model', model, '--format', 'gguf', '--out', join(scratch, 'x')]);
    expect(badFormat.stderr).toMatch(/--format must be peft, merged or onnx/);
    const missing = await brokenModel('cli-missing', (t) => t.delete('model.layers.1.mlp.up_proj.weight'));
    const r = await mcprl(['export', '--model', missing, '--format', 'onnx', '--out', join(scratch, 'x')]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/MISSING_TENSOR: .*cli-missing: tensor model\.layers\.1\.mlp\.up_proj\.weight \(shape \[128,64\]\) is missing/);
    expect(existsSync(join(scratch, 'x'))).toBe(false);
  });
});

describe('export errors name the file and tensor', () => {
  const onnx = (modelDir: string) => exportOnnx({ modelDir, out: join(scratch, 'never-written') });

  it('unsupported model_type and rope scaling', async () => {
    const dir = join(scratch, 'mistral');
    await makeRandomModel(dir, { ...MODEL, tokenizer: false });
    const cfgFile = join(dir, 'config.json');
    const cfg = JSON.parse(await readFile(cfgFile, 'utf8'));
    await writeFile(cfgFile, JSON.stringify({ ...cfg, model_type: 'mistral' }));
    await expect(onnx(dir)).rejects.toMatchObject({ code: 'UNSUPPORTED_MODEL', message: `${cfgFile}: model_type "mistral" is not supported (supported: qwen3, qwen2, llama)` });
    await writeFile(cfgFile, JSON.stringify({ ...cfg, rope_scaling: { rope_type: 'yarn', factor: 4 } }));
    await expect(onnx(dir)).rejects.toMatchObject({ code: 'UNSUPPORTED_MODEL', message: `${cfgFile}: rope_scaling type "yarn" is not supported (supported: linear, llama3)` });
    await writeFile(cfgFile, JSON.stringify({ ...cfg, hidden_size: 'big' }));
    await expect(onnx(dir)).rejects.toMatchObject({ code: 'BAD_CONFIG', message: expect.stringContaining(`${cfgFile}: hidden_size "big"`) });
  });

  it('missing, misshapen and extra tensors', async () => {
    const missing = await brokenModel('missing', (t) => t.delete('model.layers.0.self_attn.k_proj.bias'));
    await expect(onnx(missing)).rejects.toMatchObject({ code: 'MISSING_TENSOR', message: expect.stringContaining('tensor model.layers.0.self_attn.k_proj.bias (shape [32]) is missing') });
    const shape = await brokenModel('shape', (t) => t.set('model.norm.weight', f32Tensor([32], new Float32Array(32))));
    await expect(onnx(shape)).rejects.toMatchObject({ code: 'BAD_TENSOR', message: `${join(shape, 'model.safetensors')}: tensor model.norm.weight has shape [32] but config.json implies [64]` });
    const extra = await brokenModel('extra', (t) => t.set('model.layers.0.self_attn.q_norm.weight', f32Tensor([16], new Float32Array(16))));
    await expect(onnx(extra)).rejects.toMatchObject({ code: 'EXTRA_TENSOR', message: `${join(extra, 'model.safetensors')}: tensor model.layers.0.self_attn.q_norm.weight is not part of a qwen2 model with this config.json` });
  });

  it('a shard named by the index that is not there, and a tensor the index puts in the wrong shard', async () => {
    const dir = join(scratch, 'sharded');
    await makeRandomModel(dir, { ...MODEL, shards: 2, tokenizer: false });
    const indexFile = join(dir, 'model.safetensors.index.json');
    const index = JSON.parse(await readFile(indexFile, 'utf8'));
    index.weight_map['model.norm.weight'] = 'model-00001-of-00002.safetensors';
    await writeFile(indexFile, JSON.stringify(index));
    await expect(onnx(dir)).rejects.toMatchObject({ code: 'MISSING_TENSOR', message: `${join(dir, 'model-00001-of-00002.safetensors')}: tensor model.norm.weight is named by model.safetensors.index.json but is not in the file` });
    await unlink(join(dir, 'model-00002-of-00002.safetensors'));
    await expect(onnx(dir)).rejects.toMatchObject({ code: 'MISSING_FILE', message: `${join(dir, 'model-00002-of-00002.safetensors')}: shard named by ${indexFile} does not exist` });
  });
});
