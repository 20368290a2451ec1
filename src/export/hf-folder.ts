/**
 * Reading a Hugging Face model folder for export: `config.json` (through the one reader, src/hf/config.ts) and
 * every tensor of `model.safetensors` or of the shards listed in `model.safetensors.index.json`, widened to f32.
 * The native engine reads the weights with its own C++ reader; this one serves the TypeScript exporters, which
 * need the weights as plain arrays (to merge adapters and to write ONNX initializers).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ModelConfigError, readJson as readJsonFile, readModelConfig as readConfigFile, type HfConfig, type ModelSpec } from '../hf/config.js';
import { readSafetensors, SafetensorsError, toFloat32, type DType, type Tensor } from '../hf/safetensors.js';
import { ExportError } from './errors.js';

export type { HfConfig, ModelSpec } from '../hf/config.js';

/** A tensor widened to f32, row-major. */
export interface FloatTensor {
  shape: number[];
  data: Float32Array;
}

/** Reads `DIR/config.json` with the one reader (src/hf/config.ts); its errors become ExportErrors with the same code. */
export async function readModelConfig(dir: string): Promise<{ spec: ModelSpec; config: HfConfig }> {
  try {
    const { spec, config } = await readConfigFile(dir);
    return { spec, config };
  } catch (e) {
    throw asExportError(e);
  }
}

function asExportError(e: unknown): unknown {
  return e instanceof ModelConfigError ? new ExportError(e.code, e.message, { cause: e }) : e;
}

/** The tensors a model of this spec must hold, with their shapes, in the order of a HF checkpoint. */
export function expectedTensors(spec: ModelSpec): { name: string; shape: number[] }[] {
  const { hiddenSize: H, headDim: D, intermediateSize: I, numHeads, numKvHeads } = spec;
  const out: { name: string; shape: number[] }[] = [{ name: 'model.embed_tokens.weight', shape: [spec.vocabSize, H] }];
  for (let i = 0; i < spec.numLayers; i++) {
    const p = `model.layers.${i}`;
    out.push({ name: `${p}.input_layernorm.weight`, shape: [H] });
    for (const [proj, rows] of [['q_proj', numHeads * D], ['k_proj', numKvHeads * D], ['v_proj', numKvHeads * D]] as const) {
      out.push({ name: `${p}.self_attn.${proj}.weight`, shape: [rows, H] });
      if (spec.qkvBias) out.push({ name: `${p}.self_attn.${proj}.bias`, shape: [rows] });
    }
    out.push({ name: `${p}.self_attn.o_proj.weight`, shape: [H, numHeads * D] });
    if (spec.oBias) out.push({ name: `${p}.self_attn.o_proj.bias`, shape: [H] });
    if (spec.qkNorm) {
      out.push({ name: `${p}.self_attn.q_norm.weight`, shape: [D] });
      out.push({ name: `${p}.self_attn.k_norm.weight`, shape: [D] });
    }
    out.push({ name: `${p}.post_attention_layernorm.weight`, shape: [H] });
    for (const [proj, shape] of [['gate_proj', [I, H]], ['up_proj', [I, H]], ['down_proj', [H, I]]] as const) {
      out.push({ name: `${p}.mlp.${proj}.weight`, shape: [...shape] });
      if (spec.mlpBias) out.push({ name: `${p}.mlp.${proj}.bias`, shape: [shape[0]] });
    }
  }
  out.push({ name: 'model.norm.weight', shape: [H] });
  if (!spec.tieWordEmbeddings) out.push({ name: 'lm_head.weight', shape: [spec.vocabSize, H] });
  return out;
}

/** Tensors a checkpoint may carry that the forward pass does not need (a tied lm_head copy, cached RoPE tables). */
function isIgnorable(name: string, spec: ModelSpec): boolean {
  return (spec.tieWordEmbeddings && name === 'lm_head.weight') || name.endsWith('.rotary_emb.inv_freq');
}

/** The weight files of a folder: the shards named by the index (and which tensor is in which), or model.safetensors. */
export async function readWeightIndex(dir: string): Promise<{ files: string[]; weightMap: Map<string, string> | null }> {
  const indexFile = join(dir, 'model.safetensors.index.json');
  if (existsSync(indexFile)) {
    const index = await readJson(indexFile);
    const map = index?.weight_map;
    if (!map || typeof map !== 'object') throw new ExportError('BAD_CONFIG', `${indexFile}: weight_map is missing`);
    const weightMap = new Map<string, string>(Object.entries(map as Record<string, string>));
    const files = [...new Set(weightMap.values())];
    for (const f of files) {
      if (!existsSync(join(dir, f))) throw new ExportError('MISSING_FILE', `${join(dir, f)}: shard named by ${indexFile} does not exist`);
    }
    return { files, weightMap };
  }
  if (!existsSync(join(dir, 'model.safetensors'))) {
    throw new ExportError('MISSING_FILE', `${dir}: neither model.safetensors nor model.safetensors.index.json exists`);
  }
  return { files: ['model.safetensors'], weightMap: null };
}

/** Every tensor of every weight file, raw (in its stored dtype), with the file it came from. */
export async function readRawTensors(dir: string): Promise<Map<string, { tensor: Tensor; file: string }>> {
  const { files, weightMap } = await readWeightIndex(dir);
  const out = new Map<string, { tensor: Tensor; file: string }>();
  for (const f of files) {
    const path = join(dir, f);
    const { tensors } = await readSafetensorsOrThrow(path);
    for (const [name, tensor] of tensors) {
      if (out.has(name)) throw new ExportError('BAD_TENSOR', `${path}: tensor ${name} is also in ${out.get(name)!.file}`);
      out.set(name, { tensor, file: path });
    }
  }
  if (weightMap) {
    for (const [name, f] of weightMap) {
      const got = out.get(name);
      if (!got || got.file !== join(dir, f)) throw new ExportError('MISSING_TENSOR', `${join(dir, f)}: tensor ${name} is named by model.safetensors.index.json but is not in the file`);
    }
  }
  return out;
}

export async function readSafetensorsOrThrow(path: string) {
  try {
    return await readSafetensors(path);
  } catch (e) {
    if (e instanceof SafetensorsError) throw new ExportError('BAD_TENSOR', e.message, { cause: e });
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new ExportError('MISSING_FILE', `${path}: file does not exist`, { cause: e });
    throw e;
  }
}

const FLOAT_DTYPES: readonly DType[] = ['F32', 'F16', 'BF16'];

/**
 * Checks that the raw tensors are exactly those the spec needs (names, shapes, float dtypes), so that an export
 * never silently drops or invents a weight.
 */
export function validateTensors(dir: string, spec: ModelSpec, raw: Map<string, { tensor: Tensor; file: string }>): void {
  const expected = expectedTensors(spec);
  const names = new Set(expected.map((e) => e.name));
  for (const { name, shape } of expected) {
    const got = raw.get(name);
    if (!got) throw new ExportError('MISSING_TENSOR', `${dir}: tensor ${name} (shape [${shape}]) is missing from the weight files`);
    if (!FLOAT_DTYPES.includes(got.tensor.dtype)) throw new ExportError('BAD_TENSOR', `${got.file}: tensor ${name} has dtype ${got.tensor.dtype} (expected F32, F16 or BF16)`);
    if (got.tensor.shape.length !== shape.length || got.tensor.shape.some((d, i) => d !== shape[i])) {
      throw new ExportError('BAD_TENSOR', `${got.file}: tensor ${name} has shape [${got.tensor.shape}] but config.json implies [${shape}]`);
    }
  }
  for (const [name, { file }] of raw) {
    if (!names.has(name) && !isIgnorable(name, spec)) throw new ExportError('EXTRA_TENSOR', `${file}: tensor ${name} is not part of a ${spec.modelType} model with this config.json`);
  }
}

/** A whole model folder: its spec, raw config and every weight the forward pass uses, widened to f32. */
export interface HfModel {
  dir: string;
  spec: ModelSpec;
  config: HfConfig;
  weights: Map<string, FloatTensor>;
}

export async function readHfModel(dir: string): Promise<HfModel> {
  const { spec, config } = await readModelConfig(dir);
  const raw = await readRawTensors(dir);
  validateTensors(dir, spec, raw);
  const weights = new Map<string, FloatTensor>();
  for (const { name } of expectedTensors(spec)) {
    const t = raw.get(name)!.tensor;
    weights.set(name, { shape: t.shape, data: toFloat32(t, name) });
  }
  return { dir, spec, config, weights };
}

/** Parses a JSON file; a missing file is MISSING_FILE, bad JSON BAD_CONFIG, both naming the file. */
export async function readJson(file: string): Promise<any> {
  try {
    return await readJsonFile(file);
  } catch (e) {
    throw asExportError(e);
  }
}
