/**
 * Merging a LoRA adapter into its base model: W ← W + scale · B·A for every adapted projection, written as a
 * standard Hugging Face folder that any HF-compatible runtime loads without knowing about LoRA.
 */
import { join } from 'node:path';
import { writeFile } from 'node:fs/promises';
import { floatTensor, toFloat32, writeSafetensors, type Tensor } from '../hf/safetensors.js';
import { ExportError } from './errors.js';
import { readJson, readModelConfig, readSafetensorsOrThrow, readWeightIndex, type FloatTensor } from './hf-folder.js';
import { copySideFiles, writeOutputFolder } from './out-dir.js';
import { readAdapter, type Adapter, type LoraPair } from './peft.js';

/**
 * Adds scale · B·A to W ([out, in], row-major) in place. Each row of the update is accumulated in f64 and
 * added once, so the merged f32 weight is within one rounding of the exact sum.
 */
export function mergeLoraInto(w: Float32Array, pair: LoraPair, scale: number): void {
  const [out, r] = pair.b.shape;
  const inF = pair.a.shape[1];
  if (w.length !== out * inF) throw new ExportError('BAD_ADAPTER', `${pair.target}: LoRA update [${out}, ${inF}] does not match the weight (${w.length} values)`);
  const a = pair.a.data, b = pair.b.data;
  const row = new Float64Array(inF);
  for (let o = 0; o < out; o++) {
    row.fill(0);
    for (let k = 0; k < r; k++) {
      const coef = b[o * r + k];
      if (coef === 0) continue;
      const ak = k * inF;
      for (let i = 0; i < inF; i++) row[i] += coef * a[ak + i];
    }
    const wo = o * inF;
    for (let i = 0; i < inF; i++) w[wo + i] = w[wo + i] + scale * row[i];
  }
}

/** A copy of `weights` with the adapter merged in; untouched tensors are shared, not copied. */
export function applyAdapter(weights: Map<string, FloatTensor>, adapter: Adapter): Map<string, FloatTensor> {
  const out = new Map(weights);
  for (const [target, pair] of adapter.pairs) {
    const w = weights.get(target);
    if (!w) throw new ExportError('MISSING_TENSOR', `${adapter.dir}: the adapter updates ${target}, which the model does not have`);
    const data = w.data.slice();
    mergeLoraInto(data, pair, adapter.scale);
    out.set(target, { shape: w.shape, data });
  }
  return out;
}

export interface MergeOptions {
  modelDir: string;
  adapterDir: string;
  out: string;
  /**
   * Dtype of the written weights. Default 'keep': every tensor keeps the dtype it had in the base model
   * (a bf16 model stays bf16 and the same size; merged weights are rounded once, to nearest even).
   * 'F32' writes every float tensor as f32, which keeps the merge exact to f32 rounding.
   */
  dtype?: 'keep' | 'F32';
  /** Replace `out` if it exists and is not empty. Default false. */
  overwrite?: boolean;
}

/**
 * Writes `out` as a standard HF folder: the base model's config.json (torch_dtype updated when the dtype
 * changes), its non-weight files (tokenizer, chat template, generation config), and its weight files with the
 * same names, sharding and tensor order, with the adapter merged. Works shard by shard so that only one shard
 * is in memory at a time.
 */
export async function mergeAdapter(opts: MergeOptions): Promise<{ merged: string[]; files: string[] }> {
  const { spec } = await readModelConfig(opts.modelDir);
  const adapter = await readAdapter(opts.adapterDir, spec);
  const { files, weightMap } = await readWeightIndex(opts.modelDir);
  const dtype = opts.dtype ?? 'keep';
  const merged: string[] = [];
  await writeOutputFolder(opts.out, opts.overwrite ?? false, async (tmp) => {
    let totalSize = 0;
    for (const f of files) {
      const path = join(opts.modelDir, f);
      const { tensors, metadata } = await readSafetensorsOrThrow(path);
      const outTensors = new Map<string, Tensor>();
      for (const [name, t] of tensors) {
        const isFloat = t.dtype === 'F32' || t.dtype === 'F16' || t.dtype === 'BF16';
        const outDtype = dtype === 'F32' && isFloat ? 'F32' : t.dtype;
        const pair = adapter.pairs.get(name);
        if (pair) {
          if (!isFloat) throw new ExportError('BAD_TENSOR', `${path}: tensor ${name} has dtype ${t.dtype}; only float weights can be merged`);
          const w = toFloat32(t, name);
          mergeLoraInto(w, pair, adapter.scale);
          outTensors.set(name, floatTensor(outDtype as 'F32' | 'F16' | 'BF16', t.shape, w));
          merged.push(name);
        } else if (outDtype !== t.dtype) {
          outTensors.set(name, floatTensor('F32', t.shape, toFloat32(t, name)));
        } else {
          outTensors.set(name, t);
        }
        totalSize += outTensors.get(name)!.data.byteLength;
      }
      await writeSafetensors(join(tmp, f), outTensors, { ...metadata, format: 'pt' });
    }
    const missing = [...adapter.pairs.keys()].filter((t) => !merged.includes(t));
    if (missing.length > 0) throw new ExportError('MISSING_TENSOR', `${opts.modelDir}: the adapter updates ${missing[0]}, which is in none of the weight files`);
    if (weightMap) {
      const index = await readJson(join(opts.modelDir, 'model.safetensors.index.json'));
      index.metadata = { ...(index.metadata ?? {}), total_size: totalSize };
      await writeFile(join(tmp, 'model.safetensors.index.json'), JSON.stringify(index, null, 2));
    }
    const config = await readJson(join(opts.modelDir, 'config.json'));
    if (dtype === 'F32') config.torch_dtype = 'float32';
    await writeFile(join(tmp, 'config.json'), JSON.stringify(config, null, 2));
    await copySideFiles(opts.modelDir, tmp, ['config.json']);
  });
  return { merged: merged.sort(), files };
}
