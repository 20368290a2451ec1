/**
 * Malformed model and adapter folders: every failure is a rejected promise with EngineError ENGINE_LOAD and a
 * message that names the file and the tensor (never a crash of the process). The corrupt files are written
 * by hand from a valid random model.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, type RandomModelOptions } from '../scripts/random-model.js';
import { Model } from '../src/engine/model.js';
import { fault } from './faults/fault-table.js';

const root = mkdtempSync(join(tmpdir(), 'mcprl-bad-'));
const good = join(root, 'good');
const opts: RandomModelOptions = { arch: 'qwen3', seed: 3, vocabSize: 512, tokenizer: false };
let n = 0;

interface Entry { dtype: string; shape: number[]; data_offsets: [number, number] }
type Header = Record<string, Entry | Record<string, string>>;

function readSt(file: string): { header: Header; data: Buffer } {
  const buf = readFileSync(file);
  const len = Number(buf.readBigUInt64LE(0));
  return { header: JSON.parse(buf.subarray(8, 8 + len).toString('utf8')) as Header, data: buf.subarray(8 + len) };
}

function writeSt(file: string, header: Header, data: Buffer, headerLen?: bigint): void {
  const h = Buffer.from(JSON.stringify(header), 'utf8');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(headerLen ?? BigInt(h.length));
  writeFileSync(file, Buffer.concat([len, h, data]));
}

/** A copy of the good model whose model.safetensors (or config) is changed by `edit`. */
function variant(edit: (dir: string, st: { header: Header; data: Buffer }) => void): string {
  const dir = join(root, `v${n++}`);
  cpSync(good, dir, { recursive: true });
  edit(dir, readSt(join(dir, 'model.safetensors')));
  return dir;
}

const entry = (h: Header, k: string) => h[k] as Entry;

beforeAll(async () => {
  await makeRandomModel(good, opts);
  await makeRandomAdapter(join(root, 'adapter'), opts, { targetModules: ['q_proj', 'v_proj'] });
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function loadError(dir: string): Promise<Error & { code?: string }> {
  try {
    const m = await Model.load(dir, { threads: 1 });
    m.close();
  } catch (e) {
    return e as Error & { code?: string };
  }
  throw new Error(`loading ${dir} succeeded`);
}

describe('model folder errors', () => {
  it('the unmodified folder loads', async () => {
    const m = await Model.load(good, { threads: 1 });
    expect(m.config.vocabSize).toBe(512);
    m.close();
  });

  const cases: [string, () => string, RegExp][] = [
    ['missing tensor', () => variant((d, st) => { delete st.header['model.norm.weight']; writeSt(join(d, 'model.safetensors'), st.header, st.data); }),
      /model\.safetensors: missing tensor 'model\.norm\.weight'/],
    ['extra tensor', () => variant((d, st) => { st.header['model.layers.9.mlp.up_proj.weight'] = { dtype: 'F32', shape: [0], data_offsets: [0, 0] }; writeSt(join(d, 'model.safetensors'), st.header, st.data); }),
      /model\.safetensors: unexpected tensor 'model\.layers\.9\.mlp\.up_proj\.weight'/],
    ['wrong shape', () => variant((d, st) => { entry(st.header, 'model.norm.weight').shape = [8, 8]; writeSt(join(d, 'model.safetensors'), st.header, st.data); }),
      /model\.safetensors: tensor 'model\.norm\.weight' has shape \[8, 8\], expected \[64\]/],
    ['unsupported dtype', () => variant((d, st) => { entry(st.header, 'model.norm.weight').dtype = 'I32'; writeSt(join(d, 'model.safetensors'), st.header, st.data); }),
      /model\.safetensors: tensor 'model\.norm\.weight' has unsupported dtype I32/],
    ['byte length not matching the shape', () => variant((d, st) => { entry(st.header, 'model.norm.weight').dtype = 'BF16'; writeSt(join(d, 'model.safetensors'), st.header, st.data); }),
      /tensor 'model\.norm\.weight' byte length 256 does not match BF16 shape \[64\]/],
    ['truncated file', () => variant((d) => { const p = join(d, 'model.safetensors'); const b = readFileSync(p); writeFileSync(p, b.subarray(0, b.length - 1000)); }),
      /model\.safetensors: tensor '.*' data_offsets \[\d+, \d+\] out of range: the data section holds \d+ bytes \(truncated file\?\)/],
    ['truncated header', () => variant((d) => { const p = join(d, 'model.safetensors'); writeFileSync(p, readFileSync(p).subarray(0, 100)); }),
      /model\.safetensors: truncated safetensors file: header claims \d+ bytes but the file has 100 bytes/],
    ['header over 100 MiB', () => variant((d, st) => writeSt(join(d, 'model.safetensors'), st.header, st.data, 200n * 1024n * 1024n)),
      /model\.safetensors: safetensors header of 209715200 bytes exceeds the 100 MiB limit/],
    ['offsets out of range', () => variant((d, st) => { const e = entry(st.header, 'model.norm.weight'); e.data_offsets = [st.data.length - 128, st.data.length + 128]; writeSt(join(d, 'model.safetensors'), st.header, st.data); }),
      /tensor 'model\.norm\.weight' data_offsets \[\d+, \d+\] out of range/],
    ['overlapping offsets', () => variant((d, st) => { const a = entry(st.header, 'model.norm.weight'), b = entry(st.header, 'model.layers.0.input_layernorm.weight'); a.data_offsets = [b.data_offsets[0] + 4, b.data_offsets[1] + 4]; writeSt(join(d, 'model.safetensors'), st.header, st.data); }),
      /model\.safetensors: tensors '.*' and '.*' have overlapping data_offsets/],
    ['invalid header JSON', () => variant((d) => { const p = join(d, 'model.safetensors'); const b = readFileSync(p); b.write('#', 8); writeFileSync(p, b); }),
      /model\.safetensors header: invalid JSON at byte 0/],
    ['malformed \\u escape in the header', () => variant((d, st) => {
      const h = Buffer.from(JSON.stringify(st.header).replace('"model.norm.weight"', '"model.norm.w\\u00zzeight"'), 'utf8');
      const lb = Buffer.alloc(8);
      lb.writeBigUInt64LE(BigInt(h.length));
      writeFileSync(join(d, 'model.safetensors'), Buffer.concat([lb, h, st.data]));
    }), /model\.safetensors header: invalid JSON at byte \d+: .*\\u/],
    ['unsupported model_type', () => variant((d) => { const c = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8')); c.model_type = 'gpt2'; writeFileSync(join(d, 'config.json'), JSON.stringify(c)); }),
      /config\.json: model_type "gpt2" is not supported \(supported: qwen3, qwen2, llama\)/],
    ['mlp_bias (not supported by the engine)', () => variant((d) => { const c = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8')); c.model_type = 'llama'; c.mlp_bias = true; writeFileSync(join(d, 'config.json'), JSON.stringify(c)); }),
      /config\.json: mlp_bias is not supported by the engine/],
    ['inconsistent heads', () => variant((d) => { const c = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8')); c.num_key_value_heads = 3; writeFileSync(join(d, 'config.json'), JSON.stringify(c)); }),
      /config\.json: num_attention_heads 4 is not a multiple of num_key_value_heads 3/],
    ['no weights at all', () => variant((d) => rmSync(join(d, 'model.safetensors'))), /no model\.safetensors or model\.safetensors\.index\.json/],
  ];

  it.each(cases)('%s', async (_name, make, message) => {
    const err = await loadError(make());
    expect(err.code).toBe('ENGINE_LOAD');
    expect(err.message).toMatch(message);
    fault(`corrupt model folder: ${_name}`, 'ENGINE_LOAD naming the file and what is wrong', err.message.replace(root, '…').slice(0, 70));
  });

  it('sharded: a tensor missing from its shard names the shard file', async () => {
    const dir = join(root, 'sharded');
    await makeRandomModel(dir, { ...opts, shards: 2 });
    const index = JSON.parse(readFileSync(join(dir, 'model.safetensors.index.json'), 'utf8')) as { weight_map: Record<string, string> };
    const shard = index.weight_map['model.norm.weight'];
    const st = readSt(join(dir, shard));
    delete st.header['model.norm.weight'];
    writeSt(join(dir, shard), st.header, st.data);
    const err = await loadError(dir);
    expect(err.message).toMatch(new RegExp(`${shard.replace(/\./g, '\\.')}: missing tensor 'model\\.norm\\.weight'`));
  });
});

describe('adapter folder errors', () => {
  let model: Model;
  beforeAll(async () => { model = await Model.load(good, { threads: 1 }); });
  afterAll(() => model.close());

  function adapterVariant(edit: (dir: string, st: { header: Header; data: Buffer }) => void): string {
    const dir = join(root, `a${n++}`);
    cpSync(join(root, 'adapter'), dir, { recursive: true });
    edit(dir, readSt(join(dir, 'adapter_model.safetensors')));
    return dir;
  }
  const A0 = 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight';

  it('loads the good adapter', async () => {
    await model.loadAdapter('ok', join(root, 'adapter'));
    expect(model.adapterNames()).toContain('ok');
  });

  it.each([
    ['missing tensor', (d: string, st: { header: Header; data: Buffer }) => { delete st.header[A0]; writeSt(join(d, 'adapter_model.safetensors'), st.header, st.data); },
      /adapter_model\.safetensors: missing tensor 'base_model\.model\.model\.layers\.0\.self_attn\.q_proj\.lora_A\.weight'/],
    ['wrong shape', (d: string, st: { header: Header; data: Buffer }) => { const e = entry(st.header, A0); e.shape = [e.shape[1], e.shape[0]]; writeSt(join(d, 'adapter_model.safetensors'), st.header, st.data); },
      /tensor 'base_model\.model\.model\.layers\.0\.self_attn\.q_proj\.lora_A\.weight' has shape \[64, 4\], expected \[4, 64\]/],
    ['untargeted module', (d: string) => { const p = join(d, 'adapter_config.json'); const c = JSON.parse(readFileSync(p, 'utf8')); c.target_modules = ['q_proj']; writeFileSync(p, JSON.stringify(c)); },
      /unexpected tensor 'base_model\.model\.model\.layers\.0\.self_attn\.v_proj\.lora_A\.weight'/],
    ['unsupported target', (d: string) => { const p = join(d, 'adapter_config.json'); const c = JSON.parse(readFileSync(p, 'utf8')); c.target_modules = ['lm_head']; writeFileSync(p, JSON.stringify(c)); },
      /unsupported target module "lm_head" \(supported: q_proj/],
    ['DoRA', (d: string) => { const p = join(d, 'adapter_config.json'); const c = JSON.parse(readFileSync(p, 'utf8')); c.use_dora = true; writeFileSync(p, JSON.stringify(c)); },
      /adapter_config\.json: use_dora: true \(DoRA\) is not supported/],
    ['duplicate tensor name in the header', (d: string) => {
      const p = join(d, 'adapter_model.safetensors');
      const b = readFileSync(p);
      const len = Number(b.readBigUInt64LE(0));
      const h = b.subarray(8, 8 + len).toString('utf8');
      const first = h.indexOf('"base_model');
      const entry = h.slice(first, h.indexOf('}', first) + 1);
      const doubled = Buffer.from(h.slice(0, first) + entry + ',' + h.slice(first), 'utf8');
      const lb = Buffer.alloc(8);
      lb.writeBigUInt64LE(BigInt(doubled.length));
      writeFileSync(p, Buffer.concat([lb, doubled, b.subarray(8 + len)]));
    }, /adapter_model\.safetensors header: key 'base_model\..*' appears twice in one object/],
  ] as const)('%s', async (_name, edit, message) => {
    await expect(model.loadAdapter('bad', adapterVariant(edit))).rejects.toMatchObject({ code: 'ENGINE_LOAD', message: expect.stringMatching(message) });
    expect(model.adapterNames()).not.toContain('bad');
    fault(`corrupt adapter: ${_name}`, 'ENGINE_LOAD naming the tensor or field; nothing loaded', 'refused; the model serves without it');
  });
});
