/**
 * PEFT LoRA adapters in and out, plus the optimiser state that sits beside a training checkpoint. The one
 * definition of the format: its target modules, config schema and scale serve the engine, the trainer and export.
 *
 * A checkpoint folder written by the trainer holds:
 *   adapter_config.json        PEFT config (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, use_rslora,
 *                              target_modules, base_model_name_or_path, ...), loadable by PEFT / vLLM
 *   adapter_model.safetensors  F32 `base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_A.weight`
 *                              [r, in] and `...lora_B.weight` [out, r]
 *   optimizer.safetensors      AdamW moments, F32, under the adapter's keys with `.exp_avg` / `.exp_avg_sq`
 *                              appended (same shapes as the weights)
 *   trainer_state.json         {format: "mcprl-trainer-state", version: 1, step, seed, rng, adapterName,
 *                              optimizer, baseModel}: the optimiser step count (bias corrections, schedule) and
 *                              RNG state, so a resumed run continues bit-for-bit
 * Only the first two are needed to use the adapter; the last two only to continue training.
 */
import { copyFile, mkdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { readJson, type ModelSpec } from './config.js';
import { writeFileAtomic, writeJsonAtomic } from '../util/atomic.js';
import { readSafetensors, serializeSafetensors, toFloat32, f32Tensor, type Tensor } from './safetensors.js';
import { McprlError } from '../util/errors.js';

/** The projections that can carry LoRA, in PEFT's names, in the engine's order. */
export const LORA_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

export function loraParent(target: LoraTarget): 'self_attn' | 'mlp' {
  return target === 'q_proj' || target === 'k_proj' || target === 'v_proj' || target === 'o_proj' ? 'self_attn' : 'mlp';
}

/** PEFT key of one LoRA matrix, e.g. `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`. */
export function loraKey(layer: number, target: LoraTarget, which: 'A' | 'B'): string {
  return `base_model.model.model.layers.${layer}.${loraParent(target)}.${target}.lora_${which}.weight`;
}

export class AdapterError extends McprlError<'ADAPTER_INVALID'> {
  constructor(readonly dir: string, message: string, options?: { cause?: unknown }) {
    super('ADAPTER_INVALID', `${dir}: ${message}`, options);
  }
}

export const AdapterConfigSchema = z.looseObject({
  peft_type: z.literal('LORA'),
  task_type: z.string().default('CAUSAL_LM'),
  /** LoRA rank. */
  r: z.number().int().positive(),
  /** Scale numerator: the update is (alpha / r) B A, or (alpha / sqrt(r)) B A with rslora. */
  lora_alpha: z.number().positive(),
  /** Default false. */
  use_rslora: z.boolean().default(false),
  /**
   * Module names (a list; PEFT's regex-string form is accepted when it names known modules). Absent only in
   * hand-written configs; the engine then refuses the adapter, export takes the modules its weights name.
   */
  target_modules: z.union([z.array(z.string()), z.string()]).nullish(),
  /** Only false (nn.Linear layout) is supported. */
  fan_in_fan_out: z.boolean().optional(),
  /** DoRA; not supported. */
  use_dora: z.boolean().optional(),
  /** Only 'none' is supported. */
  bias: z.string().optional(),
  modules_to_save: z.array(z.string()).nullish(),
  rank_pattern: z.record(z.string(), z.unknown()).nullish(),
  alpha_pattern: z.record(z.string(), z.unknown()).nullish(),
  base_model_name_or_path: z.string().nullable().default(null),
});
export type AdapterConfig = z.infer<typeof AdapterConfigSchema>;

/** What an adapter config asks for that plain LoRA (all mcprl computes) is not, or null when nothing. */
export function unsupportedFeature(c: AdapterConfig): string | null {
  if (c.fan_in_fan_out) return 'fan_in_fan_out: true';
  if (c.use_dora) return 'use_dora: true (DoRA)';
  if (c.bias && c.bias !== 'none') return `bias: ${JSON.stringify(c.bias)}`;
  if (c.modules_to_save && c.modules_to_save.length > 0) return 'modules_to_save';
  if (c.rank_pattern && Object.keys(c.rank_pattern).length > 0) return 'rank_pattern';
  if (c.alpha_pattern && Object.keys(c.alpha_pattern).length > 0) return 'alpha_pattern';
  return null;
}

/** The scale applied to B A x. */
export function loraScale(c: Pick<AdapterConfig, 'r' | 'lora_alpha' | 'use_rslora'>): number {
  return c.use_rslora ? c.lora_alpha / Math.sqrt(c.r) : c.lora_alpha / c.r;
}

/** Target modules as a list of known names, in the engine's order. */
export function targetList(c: Pick<AdapterConfig, 'target_modules'>, dir = '<adapter>'): LoraTarget[] {
  const tm = c.target_modules;
  if (tm === undefined || tm === null) throw new AdapterError(dir, 'adapter_config.json: target_modules is missing');
  let names: string[];
  if (Array.isArray(tm)) names = tm;
  else if (tm === 'all-linear') names = [...LORA_TARGETS]; // PEFT's shorthand for every linear layer but the head
  else {
    // PEFT treats a string as a regex that must fully match the module's path.
    const re = new RegExp(`^(?:${tm})$`);
    names = LORA_TARGETS.filter((t) => re.test(t) || re.test(`model.layers.0.${loraParent(t)}.${t}`));
  }
  for (const n of names) {
    if (!(LORA_TARGETS as readonly string[]).includes(n)) throw new AdapterError(dir, `unsupported target module ${JSON.stringify(n)} (supported: ${LORA_TARGETS.join(', ')})`);
  }
  return LORA_TARGETS.filter((t) => names.includes(t));
}

export interface LoraMatrix {
  /** [rows, cols]: A is [r, in], B is [out, r]. */
  shape: [number, number];
  data: Float32Array;
}

export interface PeftAdapter {
  config: AdapterConfig;
  /** PEFT key → matrix, in the order layer, module, A then B. */
  tensors: Map<string, LoraMatrix>;
}

/**
 * Reads and validates adapter_config.json: the one reader of it. A file that is missing or not JSON fails with
 * an AdapterError whose cause is the JSON reader's ModelConfigError (MISSING_FILE, BAD_CONFIG), so that a caller
 * can tell those from an adapter that is not plain LoRA.
 */
export async function readAdapterConfig(dir: string): Promise<AdapterConfig> {
  let raw: unknown;
  try {
    raw = await readJson(join(dir, 'adapter_config.json'));
  } catch (e) {
    throw new AdapterError(dir, `cannot read adapter_config.json (${(e as Error).message})`, { cause: e });
  }
  const parsed = AdapterConfigSchema.safeParse(raw);
  if (!parsed.success) throw new AdapterError(dir, `adapter_config.json: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const unsupported = unsupportedFeature(parsed.data);
  if (unsupported) throw new AdapterError(dir, `adapter_config.json: ${unsupported} is not supported`);
  return parsed.data;
}

/** What the engine needs to load an adapter's weights (native/addon/engine_model.cc loadAdapter), every field resolved. */
export interface AdapterSettings {
  r: number;
  alpha: number;
  rslora: boolean;
  targets: LoraTarget[];
}

/** adapter_config.json as the engine applies it (readAdapterConfig has refused what plain LoRA is not). */
export async function readAdapterSettings(dir: string): Promise<AdapterSettings> {
  const c = await readAdapterConfig(dir);
  return { r: c.r, alpha: c.lora_alpha, rslora: c.use_rslora, targets: targetList(c, dir) };
}

/** Reads adapter_config.json + adapter_model.safetensors (F32, F16 or BF16 widened to f32). */
export async function readPeftAdapter(dir: string): Promise<PeftAdapter> {
  const config = await readAdapterConfig(dir);
  const { tensors: raws } = await readSafetensors(join(dir, 'adapter_model.safetensors'));
  const tensors = new Map<string, LoraMatrix>();
  for (const [key, t] of raws) {
    if (t.shape.length !== 2) throw new AdapterError(dir, `tensor ${key} has shape [${t.shape}], expected 2 dimensions`);
    // PEFT sometimes saves with the adapter name inside the key (`lora_A.default.weight`); normalise it.
    const k = key.replace(/\.lora_([AB])\.[^.]+\.weight$/, '.lora_$1.weight');
    tensors.set(k, { shape: [t.shape[0], t.shape[1]], data: toFloat32(t, key) });
  }
  return { config, tensors };
}

/** Checks that an adapter has exactly the keys and shapes a model with these dimensions expects. */
export function validateAdapter(a: PeftAdapter, dims: ModelDims, dir = '<adapter>'): void {
  const expected = adapterLayout(dims, a.config.r, targetList(a.config, dir));
  for (const { key, shape } of expected) {
    const t = a.tensors.get(key);
    if (!t) throw new AdapterError(dir, `missing tensor ${key}`);
    if (t.shape[0] !== shape[0] || t.shape[1] !== shape[1]) throw new AdapterError(dir, `tensor ${key} has shape [${t.shape}], expected [${shape}]`);
  }
  if (a.tensors.size !== expected.length) {
    const known = new Set(expected.map((e) => e.key));
    const extra = [...a.tensors.keys()].find((k) => !known.has(k));
    throw new AdapterError(dir, `unexpected tensor ${extra}`);
  }
}

/** The dimensions of a model that decide LoRA shapes. */
export interface ModelDims {
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  intermediate: number;
}

/** LoRA-relevant dimensions of a model, from its spec (src/hf/config.ts reads config.json). */
export function modelDims(spec: ModelSpec): ModelDims {
  return {
    layers: spec.numLayers,
    hidden: spec.hiddenSize,
    heads: spec.numHeads,
    kvHeads: spec.numKvHeads,
    headDim: spec.headDim,
    intermediate: spec.intermediateSize,
  };
}

/** [in, out] features of a projection. */
export function moduleDims(d: ModelDims, t: LoraTarget): [number, number] {
  switch (t) {
    case 'q_proj': return [d.hidden, d.heads * d.headDim];
    case 'k_proj': case 'v_proj': return [d.hidden, d.kvHeads * d.headDim];
    case 'o_proj': return [d.heads * d.headDim, d.hidden];
    case 'gate_proj': case 'up_proj': return [d.hidden, d.intermediate];
    case 'down_proj': return [d.intermediate, d.hidden];
  }
}

/** Every LoRA matrix of an adapter in the canonical order (layer, module, A then B) with its shape. */
export function adapterLayout(d: ModelDims, r: number, targets: readonly LoraTarget[]): { key: string; shape: [number, number] }[] {
  const out: { key: string; shape: [number, number] }[] = [];
  for (let i = 0; i < d.layers; i++) {
    for (const t of LORA_TARGETS) {
      if (!targets.includes(t)) continue;
      const [inF, outF] = moduleDims(d, t);
      out.push({ key: loraKey(i, t, 'A'), shape: [r, inF] });
      out.push({ key: loraKey(i, t, 'B'), shape: [outF, r] });
    }
  }
  return out;
}

function tensorsOf(m: Map<string, LoraMatrix>, suffix = ''): Map<string, Tensor> {
  const out = new Map<string, Tensor>();
  for (const [k, t] of m) out.set(k + suffix, f32Tensor(t.shape, t.data));
  return out;
}

/** Writes the two PEFT files (each atomically). */
export async function writePeftAdapter(dir: string, a: PeftAdapter): Promise<void> {
  await mkdir(dir, { recursive: true });
  const config = {
    ...a.config,
    peft_type: 'LORA',
    task_type: a.config.task_type ?? 'CAUSAL_LM',
    target_modules: targetList(a.config, dir),
    lora_dropout: 0,
    bias: 'none',
    fan_in_fan_out: false,
    inference_mode: true,
  };
  await writeFileAtomic(join(dir, 'adapter_model.safetensors'), serializeSafetensors(tensorsOf(a.tensors), { format: 'pt' }));
  await writeJsonAtomic(join(dir, 'adapter_config.json'), config);
}

export const TrainerStateSchema = z.object({
  format: z.literal('mcprl-trainer-state'),
  version: z.literal(1),
  /** Optimiser steps taken so far (AdamW bias corrections and the schedule continue from here). */
  step: z.number().int().nonnegative(),
  /** Seed the adapter was initialised with. */
  seed: z.number().int(),
  /** State of the trainer's PRNG (mulberry32 state word) after the last draw. */
  rng: z.number().int(),
  adapterName: z.string(),
  optimizer: z.record(z.string(), z.unknown()),
  baseModel: z.string().nullable(),
});
export type TrainerState = z.infer<typeof TrainerStateSchema>;

export interface OptimizerMoments {
  /** PEFT key → first moment (same layout as the weight). */
  expAvg: Map<string, LoraMatrix>;
  /** PEFT key → second moment. */
  expAvgSq: Map<string, LoraMatrix>;
}

export async function writeOptimizerState(dir: string, state: TrainerState, moments: OptimizerMoments): Promise<void> {
  const t = new Map<string, Tensor>([...tensorsOf(moments.expAvg, '.exp_avg'), ...tensorsOf(moments.expAvgSq, '.exp_avg_sq')]);
  await writeFileAtomic(join(dir, 'optimizer.safetensors'), serializeSafetensors(t, { format: 'mcprl-adamw', step: String(state.step) }));
  await writeJsonAtomic(join(dir, 'trainer_state.json'), state);
}

/** Reads optimizer.safetensors + trainer_state.json, or null when the folder holds a bare adapter. */
export async function readOptimizerState(dir: string): Promise<{ state: TrainerState; moments: OptimizerMoments } | null> {
  const stateFile = join(dir, 'trainer_state.json');
  try {
    await stat(stateFile);
  } catch {
    return null;
  }
  const parsed = TrainerStateSchema.safeParse(JSON.parse(await readFile(stateFile, 'utf8')));
  if (!parsed.success) throw new AdapterError(dir, `trainer_state.json: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const { tensors } = await readSafetensors(join(dir, 'optimizer.safetensors'));
  const moments: OptimizerMoments = { expAvg: new Map(), expAvgSq: new Map() };
  for (const [k, t] of tensors) {
    const m = /^(.*)\.(exp_avg|exp_avg_sq)$/.exec(k);
    if (!m || t.shape.length !== 2) throw new AdapterError(dir, `optimizer.safetensors: unexpected tensor ${k}`);
    const target = m[2] === 'exp_avg' ? moments.expAvg : moments.expAvgSq;
    target.set(m[1], { shape: [t.shape[0], t.shape[1]], data: toFloat32(t, k) });
  }
  return { state: parsed.data, moments };
}

/** The files of a PEFT adapter folder (a trainer's checkpoint keeps its optimiser state beside them). */
export const PEFT_ADAPTER_FILES = ['adapter_config.json', 'adapter_model.safetensors'] as const;

/** Copies the PEFT adapter of folder `from` (its two files, byte for byte) into the existing folder `to`. */
export async function copyPeftAdapter(from: string, to: string): Promise<void> {
  for (const f of PEFT_ADAPTER_FILES) await copyFile(join(from, f), join(to, f));
}
