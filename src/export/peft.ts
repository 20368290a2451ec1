/**
 * PEFT LoRA adapters for export (the format itself is src/hf/peft.ts): `adapter_config.json` +
 * `adapter_model.safetensors` with keys `base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_A.weight`
 * ([r, in]) and `lora_B.weight` ([out, r]); the update of a weight W [out, in] is scale · B·A.
 * Reading validates the adapter against a model's spec, so that a merge or an export fails with a message
 * naming the key instead of producing a wrong model.
 */
import { existsSync } from 'node:fs';
import { copyFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ModelConfigError } from '../hf/config.js';
import { AdapterError, LORA_TARGETS, loraParent, loraScale, PEFT_ADAPTER_FILES, readAdapterConfig as readHfAdapterConfig, type AdapterConfig, type LoraTarget } from '../hf/peft.js';
import { toFloat32 } from '../hf/safetensors.js';
import { ExportError } from './errors.js';
import { expectedTensors, readSafetensorsOrThrow, type FloatTensor, type ModelSpec } from './hf-folder.js';
import { writeOutputFolder } from './out-dir.js';

/** The LoRA factors of one projection. */
export interface LoraPair {
  /** The base weight it updates, e.g. `model.layers.0.self_attn.q_proj.weight`. */
  target: string;
  /** [r, in] */
  a: FloatTensor;
  /** [out, r] */
  b: FloatTensor;
}

export interface Adapter {
  dir: string;
  config: AdapterConfig;
  /** α/r, or α/√r with rslora. */
  scale: number;
  /** Keyed by the base weight name. */
  pairs: Map<string, LoraPair>;
}

const KEY = /^base_model\.model\.(model\.layers\.(\d+)\.(self_attn|mlp)\.([a-z_]+))\.lora_(A|B)\.weight$/;

const isLoraTarget = (m: string): m is LoraTarget => (LORA_TARGETS as readonly string[]).includes(m);

/**
 * adapter_config.json, read by the one reader (src/hf/peft.ts); its errors become ExportErrors: MISSING_FILE and
 * BAD_CONFIG (with the JSON reader's message, naming the file) for a file that is absent or not JSON, BAD_ADAPTER
 * for one that is not a plain LoRA config.
 */
export async function readAdapterConfig(dir: string): Promise<AdapterConfig> {
  try {
    return await readHfAdapterConfig(dir);
  } catch (e) {
    if (!(e instanceof AdapterError)) throw e;
    if (e.cause instanceof ModelConfigError) throw new ExportError(e.cause.code, e.cause.message, { cause: e });
    throw new ExportError('BAD_ADAPTER', e.message, { cause: e });
  }
}

/**
 * Reads a PEFT adapter folder and checks every key and shape against the model spec: keys of the form above
 * only, A and B in pairs, rank r as in the config, in/out matching the base weight, modules listed in
 * target_modules.
 */
export async function readAdapter(dir: string, spec: ModelSpec): Promise<Adapter> {
  const config = await readAdapterConfig(dir);
  const file = join(dir, 'adapter_model.safetensors');
  if (!existsSync(file)) {
    const hint = existsSync(join(dir, 'adapter_model.bin')) ? ' (only adapter_model.bin, a pickle, is there; save with safe_serialization)' : '';
    throw new ExportError('MISSING_FILE', `${file}: file does not exist${hint}`);
  }
  const { tensors } = await readSafetensorsOrThrow(file);
  const baseShapes = new Map(expectedTensors(spec).map((e) => [e.name, e.shape]));
  const targets = config.target_modules;
  const halves = new Map<string, { a?: FloatTensor; b?: FloatTensor }>();
  for (const [key, tensor] of tensors) {
    const m = KEY.exec(key);
    if (!m) throw new ExportError('BAD_ADAPTER', `${file}: tensor ${key} is not a LoRA weight mcprl understands (expected base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_{A|B}.weight)`);
    const [, modulePath, layer, block, module, half] = m;
    if (!isLoraTarget(module) || loraParent(module) !== block) {
      throw new ExportError('BAD_ADAPTER', `${file}: tensor ${key}: module ${module} is not a LoRA target (supported: ${LORA_TARGETS.join(', ')})`);
    }
    if (Number(layer) >= spec.numLayers) throw new ExportError('BAD_ADAPTER', `${file}: tensor ${key}: layer ${layer} does not exist (the model has ${spec.numLayers})`);
    if (Array.isArray(targets) && !targets.includes(module)) throw new ExportError('BAD_ADAPTER', `${file}: tensor ${key}: module ${module} is not in target_modules ${JSON.stringify(targets)}`);
    if (tensor.shape.length !== 2) throw new ExportError('BAD_ADAPTER', `${file}: tensor ${key} has shape [${tensor.shape}] (expected 2 dimensions)`);
    const target = `${modulePath}.weight`;
    const [out, inF] = baseShapes.get(target)!;
    const want = half === 'A' ? [config.r, inF] : [out, config.r];
    if (tensor.shape[0] !== want[0] || tensor.shape[1] !== want[1]) {
      throw new ExportError('BAD_ADAPTER', `${file}: tensor ${key} has shape [${tensor.shape}] but r=${config.r} and ${target} [${out}, ${inF}] imply [${want}]`);
    }
    let data: Float32Array;
    try {
      data = toFloat32(tensor, key);
    } catch {
      throw new ExportError('BAD_ADAPTER', `${file}: tensor ${key} has dtype ${tensor.dtype} (expected F32, F16 or BF16)`);
    }
    const entry = halves.get(target) ?? {};
    entry[half === 'A' ? 'a' : 'b'] = { shape: tensor.shape, data };
    halves.set(target, entry);
  }
  const pairs = new Map<string, LoraPair>();
  for (const [target, { a, b }] of halves) {
    const prefix = `base_model.model.${target.replace(/\.weight$/, '')}`;
    if (!a) throw new ExportError('BAD_ADAPTER', `${file}: tensor ${prefix}.lora_A.weight is missing (its lora_B is present)`);
    if (!b) throw new ExportError('BAD_ADAPTER', `${file}: tensor ${prefix}.lora_B.weight is missing (its lora_A is present)`);
    pairs.set(target, { target, a, b });
  }
  if (pairs.size === 0) throw new ExportError('BAD_ADAPTER', `${file}: holds no LoRA weights`);
  return { dir, config, scale: loraScale(config), pairs };
}

/**
 * Writes a validated copy of a PEFT adapter folder (adapter_config.json, adapter_model.safetensors and a
 * README.md if there is one). The files are copied byte for byte, so PEFT and vLLM (`--lora-modules`) load
 * the result exactly as they would load the source.
 */
export async function exportPeft(opts: { adapterDir: string; spec: ModelSpec; out: string; overwrite?: boolean }): Promise<{ files: string[]; pairs: number }> {
  const adapter = await readAdapter(opts.adapterDir, opts.spec);
  const files: string[] = [...PEFT_ADAPTER_FILES];
  if (existsSync(join(opts.adapterDir, 'README.md'))) files.push('README.md');
  await writeOutputFolder(opts.out, opts.overwrite ?? false, async (tmp) => {
    for (const f of files) await copyFile(join(opts.adapterDir, f), join(tmp, f));
  });
  return { files, pairs: adapter.pairs.size };
}
