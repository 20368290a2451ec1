/**
 * ONNX export of the qwen3 / qwen2 / llama forward pass (optionally with a LoRA adapter merged in), built
 * from standard ONNX operators only (default domain, opset 17), so that any ONNX runtime can run it.
 *
 * Graph contract: input `input_ids` int64 [batch, seq] (both dynamic), output `logits` float32
 * [batch, seq, vocab] (or [batch, 1, vocab] for the last position only, the `logits: 'last'` option that
 * generation-style prefill wants). No attention mask and no KV cache: every sequence of a batch has the same length
 * and position ids are 0..seq-1. RoPE angles and the causal mask are computed inside the graph from the
 * runtime sequence length, so any length works (within what the model was trained for).
 *
 * Layout: token-wise parts (norms, projections, MLP) work on [tokens, hidden] with tokens = batch·seq, so
 * every projection is one Gemm with transB=1 on the HF weight [out, in] as stored (no transposed copies
 * in the file; a tied embedding is one initializer used by both Gather and the LM head). Grouped-query attention
 * repeats each kv head over its group of query heads by broadcasting: queries are shaped
 * [batch, kv_heads, group, seq, head_dim] and keys/values [batch, kv_heads, 1, seq, head_dim], which is
 * exactly HF's repeat_kv (query head h uses kv head h / group) without materialising the copies.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ExportError } from './errors.js';
import { readHfModel, type FloatTensor, type ModelSpec } from './hf-folder.js';
import { applyAdapter } from './merge.js';
import { DataType, modelProto, writeChunks, type AttributeValue, type NodeSpec, type TensorSpec } from './onnx-proto.js';
import { copySideFiles, writeOutputFolder } from './out-dir.js';
import { readAdapter } from './peft.js';

export const ONNX_OPSET = 17;
/** IR version 8 is what opset 17 shipped with (onnx 1.12), so older checkers and runtimes accept the file. */
export const ONNX_IR_VERSION = 8;
/** ONNX files are protobufs, which cannot exceed 2 GiB; above this much weight data it goes to a side file. */
const EXTERNAL_DATA_THRESHOLD = 1.5 * 1024 ** 3;
/** Offsets in the external data file are aligned so that runtimes may memory-map it. */
const EXTERNAL_ALIGN = 4096;

/** RoPE inverse frequencies, with linear or llama3 scaling where the config asks for it (HF's _compute_*_parameters). */
export function ropeInvFreq(spec: ModelSpec): Float32Array {
  const half = spec.headDim / 2;
  const inv = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    // HF computes base ** (2i / dim) in f32; Math.fround at each step keeps the same rounding points.
    inv[i] = Math.fround(1 / Math.fround(spec.ropeTheta ** Math.fround((2 * i) / spec.headDim)));
  }
  const s = spec.ropeScaling;
  if (!s) return inv;
  if (s.type === 'linear') {
    for (let i = 0; i < half; i++) inv[i] = inv[i] / s.factor;
    return inv;
  }
  const lowWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  const highWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  for (let i = 0; i < half; i++) {
    const wavelen = (2 * Math.PI) / inv[i];
    if (wavelen > lowWavelen) inv[i] = inv[i] / s.factor;
    else if (wavelen >= highWavelen) {
      const smooth = (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      inv[i] = (1 - smooth) * (inv[i] / s.factor) + smooth * inv[i];
    }
  }
  return inv;
}

/** Accumulates nodes and initializers with unique names. */
class GraphBuilder {
  readonly nodes: NodeSpec[] = [];
  readonly initializers: TensorSpec[] = [];
  private counter = 0;
  private readonly consts = new Map<string, string>();

  op(opType: string, inputs: string[], attributes?: Record<string, AttributeValue>, hint = opType.toLowerCase()): string {
    const out = `${hint}_${this.counter++}`;
    this.nodes.push({ opType, inputs, outputs: [out], name: `n_${out}`, attributes });
    return out;
  }

  weight(name: string, t: FloatTensor): string {
    this.initializers.push({ name, dims: t.shape, dataType: DataType.FLOAT, raw: f32Bytes(t.data) });
    return name;
  }

  /** A small constant, deduplicated by value. Scalars have dims []. */
  constI64(values: number[], dims: number[] = [values.length]): string {
    return this.constant(DataType.INT64, values, dims);
  }

  constF32(values: number[], dims: number[] = [values.length]): string {
    return this.constant(DataType.FLOAT, values, dims);
  }

  private constant(dataType: typeof DataType.INT64 | typeof DataType.FLOAT, values: number[], dims: number[]): string {
    const key = `${dataType}:${dims.join(',')}:${values.join(',')}`;
    const existing = this.consts.get(key);
    if (existing) return existing;
    const name = `const_${this.consts.size}`;
    const raw = dataType === DataType.INT64 ? new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) : f32Bytes(Float32Array.from(values));
    this.initializers.push({ name, dims, dataType, raw });
    this.consts.set(key, name);
    return name;
  }
}

function f32Bytes(a: Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

const ints = (value: number[]): AttributeValue => ({ kind: 'ints', value });
const int = (value: number): AttributeValue => ({ kind: 'int', value });

/** Builds the forward graph of `spec` over `weights` (f32, adapter already merged). */
export function buildForwardGraph(spec: ModelSpec, weights: Map<string, FloatTensor>, logits: 'all' | 'last' = 'all'): { nodes: NodeSpec[]; initializers: TensorSpec[] } {
  const g = new GraphBuilder();
  const W = (name: string) => {
    const t = weights.get(name);
    if (!t) throw new ExportError('MISSING_TENSOR', `tensor ${name} is missing`);
    return g.weight(name, t);
  };
  const { hiddenSize: H, headDim: D, numHeads, numKvHeads } = spec;
  const group = numHeads / numKvHeads;

  // Shapes and tables that depend on the runtime batch and sequence length.
  const shapeBS = g.op('Shape', ['input_ids'], undefined, 'shape_bs'); // [2] = (batch, seq)
  const seqLen = g.op('Gather', [shapeBS, g.constI64([1], [])], { axis: int(0) }, 'seq_len'); // scalar
  const positions = g.op('Range', [g.constI64([0], []), seqLen, g.constI64([1], [])], undefined, 'positions'); // [S] int64
  const shapeQ = g.op('Concat', [shapeBS, g.constI64([numKvHeads, group, D])], { axis: int(0) }, 'shape_q'); // (B, S, kv, group, D)
  const shapeKV = g.op('Concat', [shapeBS, g.constI64([numKvHeads, D])], { axis: int(0) }, 'shape_kv'); // (B, S, kv, D)

  // RoPE in HF's rotate_half convention: angle[s, j] = s · inv_freq[j mod D/2], cos/sin [S, D].
  const invFreq = g.weight('rope.inv_freq', { shape: [1, D / 2], data: ropeInvFreq(spec) });
  const posF = g.op('Cast', [positions], { to: int(DataType.FLOAT) }, 'positions_f');
  const angles = g.op('Mul', [g.op('Unsqueeze', [posF, g.constI64([1])]), invFreq], undefined, 'angles'); // [S, D/2]
  const anglesFull = g.op('Concat', [angles, angles], { axis: int(-1) }, 'angles_full'); // [S, D]
  const cos = g.op('Cos', [anglesFull], undefined, 'rope_cos');
  const sin = g.op('Sin', [anglesFull], undefined, 'rope_sin');

  // Causal mask [S, S]: 0 where key position ≤ query position, -inf after it (the diagonal is always open).
  const rows = g.op('Unsqueeze', [positions, g.constI64([1])]);
  const cols = g.op('Unsqueeze', [positions, g.constI64([0])]);
  const future = g.op('Greater', [cols, rows], undefined, 'future');
  const mask = g.op('Where', [future, g.constF32([-Infinity], []), g.constF32([0], [])], undefined, 'causal_mask');

  const rmsNorm = (x: string, weight: string) => {
    // Written as Pow → ReduceMean → Add → Sqrt → Div → Mul, the pattern onnxruntime fuses into one kernel.
    const ms = g.op('ReduceMean', [g.op('Pow', [x, g.constF32([2], [])])], { axes: ints([-1]), keepdims: int(1) });
    const rms = g.op('Sqrt', [g.op('Add', [ms, g.constF32([spec.rmsNormEps], [])])]);
    return g.op('Mul', [g.op('Div', [x, rms]), weight], undefined, 'rmsnorm');
  };
  const linear = (x: string, prefix: string, bias: boolean) =>
    g.op('Gemm', bias ? [x, W(`${prefix}.weight`), W(`${prefix}.bias`)] : [x, W(`${prefix}.weight`)], { transB: int(1) }, 'linear');
  const halfSplit = g.constI64([D / 2, D / 2]);
  const rope = (x: string) => {
    // rotate_half(x) = concat(-x2, x1); result x·cos + rotate_half(x)·sin.
    const x1 = `${x}_half1`, x2 = `${x}_half2`;
    g.nodes.push({ opType: 'Split', inputs: [x, halfSplit], outputs: [x1, x2], name: `n_split_${x}`, attributes: { axis: int(-1) } });
    const rotated = g.op('Concat', [g.op('Neg', [x2]), x1], { axis: int(-1) }, 'rotate_half');
    return g.op('Add', [g.op('Mul', [x, cos]), g.op('Mul', [rotated, sin])], undefined, 'rope');
  };

  const embed = W('model.embed_tokens.weight');
  let x = g.op('Reshape', [g.op('Gather', [embed, 'input_ids'], { axis: int(0) }, 'embed'), g.constI64([-1, H])], undefined, 'hidden'); // [T, H]
  const scale = g.constF32([1 / Math.sqrt(D)], []);

  for (let i = 0; i < spec.numLayers; i++) {
    const p = `model.layers.${i}`;
    const h = rmsNorm(x, W(`${p}.input_layernorm.weight`));
    let q = g.op('Reshape', [linear(h, `${p}.self_attn.q_proj`, spec.qkvBias), shapeQ], undefined, 'q'); // (B, S, kv, group, D)
    let k = g.op('Reshape', [linear(h, `${p}.self_attn.k_proj`, spec.qkvBias), shapeKV], undefined, 'k'); // (B, S, kv, D)
    const v = g.op('Reshape', [linear(h, `${p}.self_attn.v_proj`, spec.qkvBias), shapeKV], undefined, 'v'); // (B, S, kv, D)
    if (spec.qkNorm) {
      q = rmsNorm(q, W(`${p}.self_attn.q_norm.weight`));
      k = rmsNorm(k, W(`${p}.self_attn.k_norm.weight`));
    }
    const qT = rope(g.op('Transpose', [q], { perm: ints([0, 2, 3, 1, 4]) }, 'q_t')); // (B, kv, group, S, D)
    const kT = rope(g.op('Transpose', [k], { perm: ints([0, 2, 1, 3]) }, 'k_t')); // (B, kv, S, D)
    const kTT = g.op('Transpose', [g.op('Unsqueeze', [kT, g.constI64([2])])], { perm: ints([0, 1, 2, 4, 3]) }, 'k_tt'); // (B, kv, 1, D, S)
    const vT = g.op('Unsqueeze', [g.op('Transpose', [v], { perm: ints([0, 2, 1, 3]) }), g.constI64([2])], undefined, 'v_t'); // (B, kv, 1, S, D)
    const scores = g.op('Add', [g.op('Mul', [g.op('MatMul', [qT, kTT]), scale]), mask], undefined, 'scores'); // (B, kv, group, S, S)
    const probs = g.op('Softmax', [scores], { axis: int(-1) }, 'probs');
    const ctx = g.op('Transpose', [g.op('MatMul', [probs, vT])], { perm: ints([0, 3, 1, 2, 4]) }, 'ctx'); // (B, S, kv, group, D)
    const attn = linear(g.op('Reshape', [ctx, g.constI64([-1, numHeads * D])]), `${p}.self_attn.o_proj`, spec.oBias);
    x = g.op('Add', [x, attn], undefined, 'resid');

    const h2 = rmsNorm(x, W(`${p}.post_attention_layernorm.weight`));
    const gate = linear(h2, `${p}.mlp.gate_proj`, spec.mlpBias);
    const up = linear(h2, `${p}.mlp.up_proj`, spec.mlpBias);
    const act = g.op('Mul', [g.op('Mul', [gate, g.op('Sigmoid', [gate])]), up], undefined, 'swiglu');
    x = g.op('Add', [x, linear(act, `${p}.mlp.down_proj`, spec.mlpBias)], undefined, 'resid');
  }

  const final = rmsNorm(x, W('model.norm.weight'));
  const head = spec.tieWordEmbeddings ? embed : W('lm_head.weight');
  // The LM head is a MatMul on (B, S, H) rather than a Gemm on [T, H] plus a Reshape: the Reshape of a graph
  // output costs a copy of the whole [T, V] logits (a fifth of prefill time at seq 512 in onnxruntime).
  // onnxruntime folds the Transpose of the weight once at load (one extra [H, V] copy in memory, not on disk).
  const shapeHidden = g.op('Concat', [shapeBS, g.constI64([H])], { axis: int(0) }, 'shape_hidden');
  let final3d = g.op('Reshape', [final, shapeHidden], undefined, 'final_3d'); // (B, S, H)
  if (logits === 'last') {
    // Slice ends beyond the length are clamped, so MAX_SAFE_INTEGER means "to the end".
    final3d = g.op('Slice', [final3d, g.constI64([-1]), g.constI64([Number.MAX_SAFE_INTEGER]), g.constI64([1])], undefined, 'final_last'); // (B, 1, H)
  }
  const headT = g.op('Transpose', [head], { perm: ints([1, 0]) }, 'lm_head_t'); // [H, V]
  g.nodes.push({ opType: 'MatMul', inputs: [final3d, headT], outputs: ['logits'], name: 'n_logits' });
  return { nodes: g.nodes, initializers: g.initializers };
}

export interface OnnxExportOptions {
  modelDir: string;
  /** A PEFT adapter folder to merge into the weights before export. */
  adapterDir?: string;
  out: string;
  /**
   * Put weights in `model.onnx.data` beside the graph (ONNX external data). Default 'auto': only when the
   * weights exceed 1.5 GiB, since a protobuf file cannot exceed 2 GiB.
   */
  externalData?: boolean | 'auto';
  /** Replace `out` if it exists and is not empty. Default false. */
  overwrite?: boolean;
  /** 'all' (default): logits [batch, seq, vocab]; 'last': only the last position's, [batch, 1, vocab]. */
  logits?: 'all' | 'last';
}

export interface OnnxExportResult {
  /** Path of model.onnx inside `out`. */
  file: string;
  externalData: boolean;
  bytes: number;
}

/**
 * Writes `out/model.onnx` (and `out/model.onnx.data` when external), plus the model's config.json and
 * tokenizer files so that the folder is self-describing (the layout Hugging Face Optimum uses).
 */
export async function exportOnnx(opts: OnnxExportOptions): Promise<OnnxExportResult> {
  const model = await readHfModel(opts.modelDir);
  let weights = model.weights;
  const metadata: Record<string, string> = { model_type: model.spec.modelType, source_model: opts.modelDir };
  if (opts.adapterDir) {
    const adapter = await readAdapter(opts.adapterDir, model.spec);
    weights = applyAdapter(weights, adapter);
    metadata.merged_adapter = opts.adapterDir;
  }
  const logits = opts.logits ?? 'all';
  const seqDim = logits === 'all' ? 'seq' : 1;
  const graph = buildForwardGraph(model.spec, weights, logits);
  const weightBytes = graph.initializers.reduce((n, t) => n + (t.raw?.byteLength ?? 0), 0);
  const external = opts.externalData === 'auto' || opts.externalData === undefined ? weightBytes > EXTERNAL_DATA_THRESHOLD : opts.externalData;

  let bytes = 0;
  await writeOutputFolder(opts.out, opts.overwrite ?? false, async (tmp) => {
    await mkdir(tmp, { recursive: true });
    if (external) bytes += await moveToExternalData(graph.initializers, join(tmp, 'model.onnx.data'), 'model.onnx.data');
    const chunks = modelProto({
      irVersion: ONNX_IR_VERSION,
      opsetVersion: ONNX_OPSET,
      producerName: 'mcprl',
      producerVersion: '0.1.0',
      graphName: `${model.spec.modelType}_forward`,
      docString: `input_ids int64 [batch, seq] → logits float32 [batch, ${seqDim}, vocab]; positions 0..seq-1, causal attention, no padding mask.`,
      nodes: graph.nodes,
      initializers: graph.initializers,
      inputs: [{ name: 'input_ids', elemType: DataType.INT64, dims: ['batch', 'seq'] }],
      outputs: [{ name: 'logits', elemType: DataType.FLOAT, dims: ['batch', seqDim, model.spec.vocabSize] }],
      metadata,
    });
    bytes += await writeChunks(join(tmp, 'model.onnx'), chunks);
    await copySideFiles(opts.modelDir, tmp);
    await writeFile(join(tmp, 'onnx_config.json'), JSON.stringify({
      opset: ONNX_OPSET,
      inputs: { input_ids: { dtype: 'int64', shape: ['batch', 'seq'] } },
      outputs: { logits: { dtype: 'float32', shape: ['batch', seqDim, model.spec.vocabSize] } },
      external_data: external,
      merged_adapter: opts.adapterDir ?? null,
    }, null, 2));
  });
  return { file: join(opts.out, 'model.onnx'), externalData: external, bytes };
}

/** Moves every initializer of 1 KiB or more into one external data file; small constants stay inline. */
async function moveToExternalData(initializers: TensorSpec[], file: string, location: string): Promise<number> {
  const chunks: Uint8Array[] = [];
  let offset = 0;
  for (const t of initializers) {
    if (!t.raw || t.raw.byteLength < 1024) continue;
    const pad = (EXTERNAL_ALIGN - (offset % EXTERNAL_ALIGN)) % EXTERNAL_ALIGN;
    if (pad) chunks.push(new Uint8Array(pad));
    offset += pad;
    chunks.push(t.raw);
    t.external = { location, offset, length: t.raw.byteLength };
    offset += t.raw.byteLength;
    delete t.raw;
  }
  return writeChunks(file, chunks);
}
