/**
 * Shared helpers of the training tests: the PyTorch training reference (test/oracles/torch_train_ref.py, run
 * with Debian's python3-torch by test/helpers/oracles.ts's PYTHON), seeded token sequences, and gradient
 * comparison. Tests call requireOracle('torch') before using the reference.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { makeRng } from '../scripts/random-model.js';
import { readSafetensors, toFloat32 } from '../src/hf/safetensors.js';
import type { LossConfig, TrainSequence } from '../src/engine/trainer.js';
import { PYTHON } from './helpers/oracles.js';

const run = promisify(execFile);
const SCRIPT = fileURLToPath(new URL('./oracles/torch_train_ref.py', import.meta.url));

export interface TorchTrainRequest {
  model: string;
  adapter: string | null;
  sequences: TrainSequence[];
  loss: LossConfig | null;
  /** Writes the reference LoRA gradients here (safetensors, PEFT keys). */
  grads_out?: string;
  /** One clip + AdamW step in torch; the new weights go to params_out. */
  optimizer?: { lr: number; beta1?: number; beta2?: number; eps?: number; weightDecay?: number; maxGradNorm?: number };
  params_out?: string;
}

export interface TorchTrainResult {
  loss: number;
  policyLoss: number;
  kl: number;
  clipFraction: number;
  meanRatio: number;
  entropy: number;
  trainedTokens: number;
  gradNorm?: number;
  /** Per sequence, aligned with tokenIds (entry 0 is 0). */
  logprobs: number[][];
}

/** Runs several requests in one Python process (torch's import dominates a single request). */
export async function torchTrainRef(requests: TorchTrainRequest[]): Promise<TorchTrainResult[]> {
  const dir = await mkdtemp(join(tmpdir(), 'mcprl-torch-train-'));
  try {
    const file = join(dir, 'request.json');
    // Token masks travel as lists of allowed ids (a Uint32Array would serialise as an object).
    const wire = requests.map((r) => ({
      ...r,
      sequences: r.sequences.map(({ tokenMasks, ...s }) => (tokenMasks ? { ...s, allowed: tokenMasks.map((m) => (m ? maskIds(m) : null)) } : s)),
    }));
    await writeFile(file, JSON.stringify(wire));
    const { stdout } = await run(PYTHON, [SCRIPT, file], { maxBuffer: 256 * 1024 * 1024, env: { ...process.env, OMP_NUM_THREADS: '1' } });
    return JSON.parse(stdout) as TorchTrainResult[];
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The token ids a bitset mask allows. */
export function maskIds(m: Uint32Array): number[] {
  const out: number[] = [];
  for (let w = 0; w < m.length; w++) for (let b = 0; b < 32; b++) if ((m[w] >>> b) & 1) out.push(w * 32 + b);
  return out;
}

/** A bitset over `vocab` tokens allowing `ids`. */
export function maskOf(vocab: number, ids: Iterable<number>): Uint32Array {
  const m = new Uint32Array(Math.ceil(vocab / 32));
  for (const id of ids) m[id >>> 5] |= 1 << (id & 31);
  return m;
}

export async function readF32Tensors(file: string): Promise<Map<string, Float32Array>> {
  const { tensors } = await readSafetensors(file);
  return new Map([...tensors].map(([k, t]) => [k, toFloat32(t, k)]));
}

/**
 * Per-tensor error of `got` against `want`: max |got - want| / max |want| (the relative error of the
 * tensor as a whole; elementwise relative error is meaningless for entries near zero).
 */
export function tensorRelErrors(got: Map<string, Float32Array>, want: Map<string, Float32Array>): { worst: number; key: string; errors: Map<string, number> } {
  const errors = new Map<string, number>();
  let worst = 0;
  let key = '';
  if (got.size !== want.size) throw new Error(`tensor sets differ: ${got.size} vs ${want.size}`);
  for (const [k, w] of want) {
    const g = got.get(k);
    if (!g || g.length !== w.length) throw new Error(`tensor ${k} missing or of another size`);
    let diff = 0, scale = 0;
    for (let i = 0; i < w.length; i++) {
      diff = Math.max(diff, Math.abs(g[i] - w[i]));
      scale = Math.max(scale, Math.abs(w[i]));
    }
    const e = scale > 0 ? diff / scale : diff;
    errors.set(k, e);
    if (e >= worst) { worst = e; key = k; }
  }
  return { worst, key, errors };
}

/** Seeded sequences: random tokens, a prompt of `prompt` tokens (mask 0), then loss tokens with a few holes. */
export function randomSequences(seed: number, vocab: number, lengths: number[], opts: { prompt?: number; advantages?: number[] } = {}): TrainSequence[] {
  const rng = makeRng(seed);
  return lengths.map((len, i) => {
    const tokenIds = Array.from({ length: len }, () => Math.floor(rng.uniform() * vocab));
    const prompt = opts.prompt ?? 3;
    // Holes in the mask stand for tool results inside an assistant trajectory.
    const mask = tokenIds.map((_, t) => (t >= prompt && t % 7 !== 5 ? 1 : 0));
    return { tokenIds, mask, advantage: opts.advantages?.[i] ?? (rng.uniform() * 2 - 1) };
  });
}

/** Old log-probabilities = current ones + seeded noise, so ratios spread and some tokens clip. */
export function perturbedOld(seed: number, current: Float32Array[], std: number): number[][] {
  const rng = makeRng(seed);
  return current.map((lp) => Array.from(lp, (x, t) => (t === 0 ? 0 : x + std * rng.normal())));
}
