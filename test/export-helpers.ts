/**
 * Shared helpers of the export tests: run an exported ONNX model in onnxruntime-node and run onnx's own
 * checker (Debian's python3-onnx run by test/helpers/oracles.ts's PYTHON, one process for many files; tests
 * call requireOracle('onnx') first). The PyTorch reference is the project's shared one,
 * test/oracles/torch_ref.py through test/oracles/torch-oracle.ts.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import * as ort from 'onnxruntime-node';
import { PYTHON } from './helpers/oracles.js';

const run = promisify(execFile);

/** Per-token logprobs in the reference's convention: entry t is log p(ids[t] | ids[<t]), entry 0 is 0. */
export function tokenLogprobs(logits: Float32Array, vocab: number, ids: number[][]): number[][] {
  const seq = ids[0].length;
  return ids.map((row, b) => {
    const out = [0];
    for (let t = 0; t + 1 < seq; t++) {
      const base = (b * seq + t) * vocab;
      let max = -Infinity;
      for (let v = 0; v < vocab; v++) max = Math.max(max, logits[base + v]);
      let sum = 0;
      for (let v = 0; v < vocab; v++) sum += Math.exp(logits[base + v] - max);
      out.push(logits[base + row[t + 1]] - max - Math.log(sum));
    }
    return out;
  });
}

/** Runs `input_ids` [batch, seq] through an ONNX model; returns its logits and per-token logprobs. */
export async function ortRun(session: ort.InferenceSession, ids: number[][]): Promise<{ logits: Float32Array; dims: readonly number[]; logprobs: number[][] }> {
  const flat = BigInt64Array.from(ids.flat().map(BigInt));
  const result = await session.run({ input_ids: new ort.Tensor('int64', flat, [ids.length, ids[0].length]) });
  const logits = result.logits.data as Float32Array;
  const vocab = result.logits.dims[2];
  return { logits, dims: result.logits.dims, logprobs: tokenLogprobs(logits, vocab, ids) };
}

/** onnx.checker.check_model(path, full_check=True) on each file; returns the error text per file ('' when valid). */
export async function onnxCheck(files: string[]): Promise<string[]> {
  const script = [
    'import json, sys, onnx',
    'out = []',
    'for f in sys.argv[1:]:',
    '    try:',
    '        onnx.checker.check_model(f, full_check=True)',
    "        out.append('')",
    '    except Exception as e:',
    '        out.append(type(e).__name__ + ": " + str(e))',
    'print(json.dumps(out))',
  ].join('\n');
  const { stdout } = await run(PYTHON, ['-c', script, ...files], { maxBuffer: 16 * 1024 * 1024 });
  return JSON.parse(stdout);
}

export function maxAbsDiff(a: ArrayLike<number>[] | ArrayLike<number>, b: ArrayLike<number>[] | ArrayLike<number>): number {
  const fa = flatten(a), fb = flatten(b);
  if (fa.length !== fb.length) throw new Error(`length mismatch ${fa.length} vs ${fb.length}`);
  let m = 0;
  for (let i = 0; i < fa.length; i++) {
    const d = Math.abs(fa[i] - fb[i]);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
  }
  return m;
}

function flatten(a: ArrayLike<number>[] | ArrayLike<number>): ArrayLike<number> {
  if (a.length > 0 && typeof (a as ArrayLike<unknown>)[0] === 'object') return (a as ArrayLike<number>[]).flatMap((r) => Array.from(r));
  return a as ArrayLike<number>;
}

/** Deterministic token ids in [0, vocab). */
export function tokenIds(batch: number, seq: number, vocab: number, seed: number): number[][] {
  let s = seed >>> 0;
  const next = () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s;
  };
  return Array.from({ length: batch }, () => Array.from({ length: seq }, () => next() % vocab));
}
