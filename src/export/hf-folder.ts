/**
 * Reading a Hugging Face model folder for export: `config.json` (qwen3, qwen2, llama) and every tensor of
 * `model.safetensors` or of the shards listed in `model.safetensors.index.json`, widened to f32. The native
 * engine loads models with its own C++ reader; this one serves the TypeScript exporters, which need the
 * weights as plain arrays (to merge adapters and to write ONNX initializers).
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { readSafetensors, SafetensorsError, toFloat32, type DType, type Tensor } from '../engine/safetensors.js';
import { ExportError } from './errors.js';

export const SUPPORTED_MODEL_TYPES = ['qwen3', 'qwen2', 'llama'] as const;
export type ModelType = (typeof SUPPORTED_MODEL_TYPES)[number];

const positiveInt = z.number().int().positive();

/** The fields of config.json the exporters read; everything else in the file is kept but ignored. */
export const HfConfigSchema = z.looseObject({
  model_type: z.string(),
  vocab_size: positiveInt,
  hidden_size: positiveInt,
  intermediate_size: positiveInt,
  num_hidden_layers: positiveInt,
  num_attention_heads: positiveInt,
  /** Default num_attention_heads (no grouped-query attention). */
  num_key_value_heads: positiveInt.optional(),
  /** Default hidden_size / num_attention_heads. */
  head_dim: positiveInt.nullish(),
  /** Default 'silu'; nothing else is supported. */
  hidden_act: z.string().optional(),
  /** Default 1e-6. */
  rms_norm_eps: z.number().positive().optional(),
  /** Default 10000. */
  rope_theta: z.number().positive().optional(),
  rope_scaling: z.looseObject({
    rope_type: z.string().optional(),
    type: z.string().optional(),
    factor: z.number().optional(),
    low_freq_factor: z.number().optional(),
    high_freq_factor: z.number().optional(),
    original_max_position_embeddings: z.number().optional(),
  }).nullish(),
  /** Default false (the default of LlamaConfig, Qwen2Config and Qwen3Config). */
  tie_word_embeddings: z.boolean().optional(),
  /** llama and qwen3: bias on q/k/v/o. Default false. */
  attention_bias: z.boolean().optional(),
  /** llama: bias on gate/up/down. Default false. */
  mlp_bias: z.boolean().optional(),
  /** qwen2: sliding-window attention is not supported. Default false. */
  use_sliding_window: z.boolean().optional(),
  torch_dtype: z.string().nullish(),
});
export type HfConfig = z.infer<typeof HfConfigSchema>;

/** Llama 3.1 rope scaling of the inverse frequencies. */
export interface Llama3RopeScaling {
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositionEmbeddings: number;
}

/** The architecture of a model, resolved from config.json with every default applied. */
export interface ModelSpec {
  modelType: ModelType;
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: Llama3RopeScaling | null;
  tieWordEmbeddings: boolean;
  /** Bias on q/k/v projections (always for qwen2). */
  qkvBias: boolean;
  /** Bias on the output projection. */
  oBias: boolean;
  /** Bias on gate/up/down projections. */
  mlpBias: boolean;
  /** Per-head RMSNorm of q and k before RoPE (qwen3). */
  qkNorm: boolean;
}

/** A tensor widened to f32, row-major. */
export interface FloatTensor {
  shape: number[];
  data: Float32Array;
}

/** Reads and validates `DIR/config.json` into a ModelSpec (and the raw object, to copy or rewrite it). */
export async function readModelConfig(dir: string): Promise<{ spec: ModelSpec; config: HfConfig }> {
  const file = join(dir, 'config.json');
  const raw = await readJson(file);
  if (typeof raw?.model_type === 'string' && !(SUPPORTED_MODEL_TYPES as readonly string[]).includes(raw.model_type)) {
    throw new ExportError('UNSUPPORTED_MODEL', `${file}: model_type ${JSON.stringify(raw.model_type)} is not supported (supported: ${SUPPORTED_MODEL_TYPES.join(', ')})`);
  }
  const parsed = HfConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ExportError('BAD_CONFIG', `${file}: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  const c = parsed.data;
  const modelType = c.model_type as ModelType;
  if ((c.hidden_act ?? 'silu') !== 'silu') throw new ExportError('UNSUPPORTED_MODEL', `${file}: hidden_act ${JSON.stringify(c.hidden_act)} is not supported (only silu)`);
  if (c.use_sliding_window) throw new ExportError('UNSUPPORTED_MODEL', `${file}: use_sliding_window is not supported`);
  const numHeads = c.num_attention_heads;
  const numKvHeads = c.num_key_value_heads ?? numHeads;
  if (numHeads % numKvHeads !== 0) throw new ExportError('BAD_CONFIG', `${file}: num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);
  const headDim = c.head_dim ?? c.hidden_size / numHeads;
  if (!Number.isInteger(headDim) || headDim % 2 !== 0) throw new ExportError('BAD_CONFIG', `${file}: head_dim ${headDim} must be an even integer`);
  const spec: ModelSpec = {
    modelType,
    vocabSize: c.vocab_size,
    hiddenSize: c.hidden_size,
    intermediateSize: c.intermediate_size,
    numLayers: c.num_hidden_layers,
    numHeads,
    numKvHeads,
    headDim,
    rmsNormEps: c.rms_norm_eps ?? 1e-6,
    ropeTheta: c.rope_theta ?? 10000,
    ropeScaling: resolveRopeScaling(file, c.rope_scaling),
    tieWordEmbeddings: c.tie_word_embeddings ?? false,
    qkvBias: modelType === 'qwen2' || (c.attention_bias ?? false),
    oBias: modelType !== 'qwen2' && (c.attention_bias ?? false),
    mlpBias: modelType === 'llama' && (c.mlp_bias ?? false),
    qkNorm: modelType === 'qwen3',
  };
  return { spec, config: c };
}

function resolveRopeScaling(file: string, s: HfConfig['rope_scaling']): Llama3RopeScaling | null {
  if (!s) return null;
  const kind = s.rope_type ?? s.type ?? 'default';
  if (kind === 'default') return null;
  if (kind !== 'llama3') throw new ExportError('UNSUPPORTED_MODEL', `${file}: rope_scaling type ${JSON.stringify(kind)} is not supported (only llama3)`);
  const need = (key: 'factor' | 'low_freq_factor' | 'high_freq_factor' | 'original_max_position_embeddings') => {
    const v = s[key];
    if (typeof v !== 'number') throw new ExportError('BAD_CONFIG', `${file}: rope_scaling.${key} is required for llama3 rope scaling`);
    return v;
  };
  return {
    factor: need('factor'),
    lowFreqFactor: need('low_freq_factor'),
    highFreqFactor: need('high_freq_factor'),
    originalMaxPositionEmbeddings: need('original_max_position_embeddings'),
  };
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

export async function readJson(file: string): Promise<any> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new ExportError('MISSING_FILE', `${file}: file does not exist`, { cause: e });
    throw e;
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ExportError('BAD_CONFIG', `${file}: not valid JSON (${(e as Error).message})`, { cause: e });
  }
}
