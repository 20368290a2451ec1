/**
 * The one reader of a Hugging Face model folder's `config.json` (SUPPORTED_MODEL_TYPES), used by the engine, the
 * trainer, export and merge. It resolves every default, so that what the native engine receives (the ModelSpec,
 * see src/engine/model.ts) is complete: native code never parses config.json itself and has no defaults of its
 * own. `generation_config.json` adds EOS ids when present.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { McprlError } from '../util/errors.js';

/**
 * The architectures mcprl runs, by config.json's model_type: the one list (help texts and
 * refusals read it). The native engine has none: it runs the architecture the ModelSpec's flags describe.
 */
export const SUPPORTED_MODEL_TYPES = ['qwen3', 'qwen2', 'llama'] as const;
export type ModelType = (typeof SUPPORTED_MODEL_TYPES)[number];

export type ModelConfigErrorCode =
  /** config.json is absent. */
  | 'MISSING_FILE'
  /** config.json is not valid JSON, lacks a required field or has inconsistent sizes. */
  | 'BAD_CONFIG'
  /** The model_type, activation, rope scaling or another setting is one mcprl does not support. */
  | 'UNSUPPORTED_MODEL';

/** A model folder's config.json cannot be used; the message names the file and the field. */
export class ModelConfigError extends McprlError<ModelConfigErrorCode> {}

/**
 * Every integer of config.json has a range, so that a corrupt or hostile file fails here, naming the field, rather
 * than being narrowed to a C int in the engine and failing every request later. The bounds are generous: far
 * above any released model of the supported architectures, and below 2^31 for every product the engine forms.
 */
const sizeUpTo = (max: number) => z.number().int().positive().max(max);
const LIMITS = { vocab: 1 << 22, width: 1 << 17, layers: 1024, heads: 1024, positions: 1 << 24 } as const;
const TokenId = z.number().int().nonnegative().max(LIMITS.vocab);
const IdOrIds = z.union([TokenId, z.array(TokenId)]).nullish();

/** The fields of config.json mcprl reads; everything else in the file is kept but ignored. */
export const HfConfigSchema = z.looseObject({
  model_type: z.string(),
  vocab_size: sizeUpTo(LIMITS.vocab),
  hidden_size: sizeUpTo(LIMITS.width),
  intermediate_size: sizeUpTo(LIMITS.width * 4),
  num_hidden_layers: sizeUpTo(LIMITS.layers),
  num_attention_heads: sizeUpTo(LIMITS.heads),
  /** Default num_attention_heads (no grouped-query attention). */
  num_key_value_heads: sizeUpTo(LIMITS.heads).optional(),
  /** Default hidden_size / num_attention_heads. */
  head_dim: sizeUpTo(1024).nullish(),
  /** Longest sequence, in tokens. Default 32768. */
  max_position_embeddings: sizeUpTo(LIMITS.positions).optional(),
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
    original_max_position_embeddings: sizeUpTo(LIMITS.positions).optional(),
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
  eos_token_id: IdOrIds,
});
export type HfConfig = z.infer<typeof HfConfigSchema>;

/** RoPE scaling: `linear` divides every frequency by `factor`; `llama3` is Llama 3.1's frequency-dependent rule. */
export type RopeScaling =
  | { type: 'linear'; factor: number }
  | { type: 'llama3'; factor: number; lowFreqFactor: number; highFreqFactor: number; originalMaxPositionEmbeddings: number };

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
  /** Longest sequence, in tokens. */
  maxPositionEmbeddings: number;
  rmsNormEps: number;
  ropeTheta: number;
  /** null: plain RoPE. */
  ropeScaling: RopeScaling | null;
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

/** A model folder's configuration: the resolved spec, the raw config.json (to copy or rewrite it), and EOS ids. */
export interface ModelConfigFile {
  spec: ModelSpec;
  config: HfConfig;
  /** config.json's and generation_config.json's eos_token_id, deduplicated. */
  eosTokenIds: number[];
}

const GenerationConfigSchema = z.looseObject({ eos_token_id: IdOrIds });

function ids(v: number | number[] | null | undefined): number[] {
  return v === null || v === undefined ? [] : Array.isArray(v) ? v : [v];
}

/** Reads and validates `DIR/config.json` (and generation_config.json's EOS ids). */
export async function readModelConfig(dir: string): Promise<ModelConfigFile> {
  const file = join(dir, 'config.json');
  const raw = await readJson(file);
  if (typeof raw?.model_type === 'string' && !(SUPPORTED_MODEL_TYPES as readonly string[]).includes(raw.model_type)) {
    throw new ModelConfigError('UNSUPPORTED_MODEL', `${file}: model_type ${JSON.stringify(raw.model_type)} is not supported (supported: ${SUPPORTED_MODEL_TYPES.join(', ')})`);
  }
  const parsed = HfConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const value = issue.path.reduce<unknown>((v, k) => (v !== null && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[k] : undefined), raw);
    const shown = value === undefined ? '' : ` ${JSON.stringify(value)}`;
    throw new ModelConfigError('BAD_CONFIG', `${file}: ${issue.path.join('.') || '(root)'}${shown}: ${issue.message}`);
  }
  const c = parsed.data;
  const modelType = c.model_type as ModelType;
  if ((c.hidden_act ?? 'silu') !== 'silu') throw new ModelConfigError('UNSUPPORTED_MODEL', `${file}: hidden_act ${JSON.stringify(c.hidden_act)} is not supported (only silu)`);
  if (c.use_sliding_window) throw new ModelConfigError('UNSUPPORTED_MODEL', `${file}: use_sliding_window is not supported`);
  const numHeads = c.num_attention_heads;
  const numKvHeads = c.num_key_value_heads ?? numHeads;
  if (numHeads % numKvHeads !== 0) throw new ModelConfigError('BAD_CONFIG', `${file}: num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);
  const headDim = c.head_dim ?? c.hidden_size / numHeads;
  if (!Number.isInteger(headDim) || headDim % 2 !== 0 || headDim > 1024) throw new ModelConfigError('BAD_CONFIG', `${file}: head_dim ${headDim} must be an even integer of at most 1024`);
  const spec: ModelSpec = {
    modelType,
    vocabSize: c.vocab_size,
    hiddenSize: c.hidden_size,
    intermediateSize: c.intermediate_size,
    numLayers: c.num_hidden_layers,
    numHeads,
    numKvHeads,
    headDim,
    maxPositionEmbeddings: c.max_position_embeddings ?? 32768,
    rmsNormEps: c.rms_norm_eps ?? 1e-6,
    ropeTheta: c.rope_theta ?? 10000,
    ropeScaling: resolveRopeScaling(file, c.rope_scaling),
    tieWordEmbeddings: c.tie_word_embeddings ?? false,
    qkvBias: modelType === 'qwen2' || (c.attention_bias ?? false),
    oBias: modelType !== 'qwen2' && (c.attention_bias ?? false),
    mlpBias: modelType === 'llama' && (c.mlp_bias ?? false),
    qkNorm: modelType === 'qwen3',
  };
  const eos = new Set(ids(c.eos_token_id));
  const gen = join(dir, 'generation_config.json');
  if (existsSync(gen)) {
    try {
      const g = GenerationConfigSchema.safeParse(JSON.parse(await readFile(gen, 'utf8')));
      if (g.success) for (const id of ids(g.data.eos_token_id)) eos.add(id);
    } catch {
      // generation_config.json is optional metadata; a broken one must not block loading the weights.
    }
  }
  return { spec, config: c, eosTokenIds: [...eos] };
}

function resolveRopeScaling(file: string, s: HfConfig['rope_scaling']): RopeScaling | null {
  if (!s) return null;
  const kind = s.rope_type ?? s.type ?? 'default';
  if (kind === 'default') return null;
  if (kind !== 'linear' && kind !== 'llama3') throw new ModelConfigError('UNSUPPORTED_MODEL', `${file}: rope_scaling type ${JSON.stringify(kind)} is not supported (supported: linear, llama3)`);
  const need = (key: 'factor' | 'low_freq_factor' | 'high_freq_factor' | 'original_max_position_embeddings') => {
    const v = s[key];
    if (typeof v !== 'number') throw new ModelConfigError('BAD_CONFIG', `${file}: rope_scaling.${key} is required for ${kind} rope scaling`);
    return v;
  };
  if (kind === 'linear') return { type: 'linear', factor: need('factor') };
  return {
    type: 'llama3',
    factor: need('factor'),
    lowFreqFactor: need('low_freq_factor'),
    highFreqFactor: need('high_freq_factor'),
    originalMaxPositionEmbeddings: need('original_max_position_embeddings'),
  };
}

/** Parses a JSON file; a missing file is MISSING_FILE, bad JSON BAD_CONFIG, both naming the file. */
export async function readJson(file: string): Promise<any> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new ModelConfigError('MISSING_FILE', `${file}: file does not exist`, { cause: e });
    throw e;
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ModelConfigError('BAD_CONFIG', `${file}: not valid JSON (${(e as Error).message})`, { cause: e });
  }
}
