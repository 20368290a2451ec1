/**
 * Training figures on the ~50M-parameter random Qwen3-shaped model (scripts/random-model.ts BENCH_50M: hidden
 * 256, 4 layers, 8 / 4 heads, head_dim 32, intermediate 768, the real 151,936-token vocabulary, tied).
 *
 * One train step = forward (every layer's activations saved) + chunked LM head / log-softmax on the loss
 * tokens + backward to every LoRA tensor + grad-norm clip + AdamW; GRPO loss with old logprobs, β = 0 (no
 * reference forward), LoRA rank 16 on all seven projections. Batch: 4096 tokens per step, as 8 sequences of
 * 512 or 2 of 2048, each packed into one micro-batch, every token but the first of each sequence carrying loss
 * (the LM head's worst case; prompts and tool results would be cheaper). Median of 3 steps after a warm-up.
 *
 * FLOPs counted (2 per multiply-add, only the matrix products the step really performs; elementwise work,
 * softmax exponentials and norms not counted):
 *   base projections: forward x·Wᵀ and backward dy·W (no weight gradient: frozen) = 4 · T · Σ in·out
 *   LoRA per module: forward 2·T·r·(in + out); backward dy·B, dBᵀ, dA, dh·A = 2·T·r·(2·out + 2·in)
 *   attention (causal, per sequence of n): forward Q·Kᵀ and P·V = 2 · H·D · n(n+1); backward recomputes the
 *     scores and forms dP, dV, dK, dQ = 5 · H·D · n(n+1)
 *   LM head on M loss tokens (native/ops/lm_head.h): logits and pᵀW in the forward = 2 · 2·M·V·C; its
 *     backward is O(M·C)
 * The same run measures OpenBLAS sgemm at n = 2048 (the machine's practical GEMM peak) for the fraction.
 *
 * The peer, when /usr/bin/python3 has torch: bench/torch_lora_step.py, the plain PyTorch f32 autograd step on
 * the same shape, rank, targets, tokens and GRPO loss, run in the same sitting right after the engine's figures at
 * each length; `train.speedup_over_torch.*` is engine tokens/s ÷ PyTorch tokens/s from this run.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BENCH_50M, makeRandomModel, makeRng, resolveShape } from '../scripts/random-model.js';
import { Model } from '../src/engine/model.js';
import { loadNative } from '../src/engine/native.js';
import { loadNativeTesting } from '../src/engine/native-testing.js';
import { Trainer, type TrainSequence } from '../src/engine/trainer.js';
import type { Emit } from './run.js';

const RANK = 16;
const TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];
const STEP_TOKENS = 4096;

export function stepFlops(shape: ReturnType<typeof resolveShape>, seqLens: number[], lossTokens: number, rank: number): number {
  const { hiddenSize: C, numLayers: L, numHeads: H, numKvHeads: Hkv, headDim: D, intermediateSize: I, vocabSize: V } = shape;
  const T = seqLens.reduce((a, b) => a + b, 0);
  const mods: [number, number][] = [[C, H * D], [C, Hkv * D], [C, Hkv * D], [H * D, C], [C, I], [C, I], [I, C]];
  let perLayer = 0;
  for (const [inF, outF] of mods) {
    perLayer += 4 * T * inF * outF; // base forward + activation backward
    perLayer += 2 * T * rank * (inF + outF) + 2 * T * rank * (2 * outF + 2 * inF); // LoRA forward + backward
  }
  for (const n of seqLens) perLayer += 7 * H * D * n * (n + 1); // attention forward (2) + backward (5)
  return L * perLayer + 4 * lossTokens * V * C;
}

const PYTHON = '/usr/bin/python3';
const hasTorch = (): boolean => spawnSync(PYTHON, ['-c', 'import torch'], { stdio: 'ignore' }).status === 0;

/** tokens/s of the PyTorch peer step (bench/torch_lora_step.py) for the same shape, rank and batch. */
function torchStep(shape: ReturnType<typeof resolveShape>, seq: number, threads: number): number {
  const req = {
    hidden: shape.hiddenSize, layers: shape.numLayers, heads: shape.numHeads, kv_heads: shape.numKvHeads, head_dim: shape.headDim,
    inter: shape.intermediateSize, vocab: shape.vocabSize, rank: RANK, seq, step_tokens: STEP_TOKENS, threads,
  };
  const script = join(dirname(fileURLToPath(import.meta.url)), 'torch_lora_step.py');
  const r = spawnSync(PYTHON, [script], { input: JSON.stringify(req), encoding: 'utf8', maxBuffer: 1 << 20 });
  if (r.status !== 0) throw new Error(`${script} failed: ${r.stderr}`);
  return (JSON.parse(r.stdout.trim().split('\n').pop()!) as { tokens_per_s: number }).tokens_per_s;
}

export default async function trainBench(emit: Emit): Promise<void> {
  const addon = loadNative();
  const threads = addon.info().maxThreads;
  const ops = loadNativeTesting();
  const peak = await ops.gemmBench(2048, addon.info().openblas ? 'blas' : 'portable', 3, threads);
  emit(addon.info().openblas ? 'train.gemm_peak.openblas.n2048' : 'train.gemm_peak.portable.n2048', peak, 'GFLOP/s');

  const dir = mkdtempSync(join(tmpdir(), 'mcprl-bench-train-'));
  try {
    const modelOpts = { ...BENCH_50M, arch: 'qwen3' as const, seed: 1, tokenizer: false };
    await makeRandomModel(dir, modelOpts);
    const shape = resolveShape(modelOpts);
    const model = await Model.load(dir, { threads });
    try {
      const trainer = await Trainer.create(model, { adapterName: 'bench', rank: RANK, alpha: 2 * RANK, targets: TARGETS, seed: 1, optimizer: { lr: 1e-5 } });
      const rng = makeRng(3);
      const torch = hasTorch();
      for (const seq of [512, 2048]) {
        const batch: TrainSequence[] = Array.from({ length: STEP_TOKENS / seq }, (_, i) => {
          const tokenIds = Array.from({ length: seq }, () => Math.floor(rng.uniform() * shape.vocabSize));
          return {
            tokenIds,
            mask: tokenIds.map((_, t) => (t === 0 ? 0 : 1)),
            advantage: i % 2 ? 1 : -1,
            oldLogprobs: tokenIds.map(() => -12 + 0.1 * rng.normal()),
          };
        });
        const step = () => trainer.trainStep(batch, { kind: 'grpo' }, { microBatchTokens: seq });
        await step(); // warm-up: buffers grow to their final size
        const times: number[] = [];
        for (let r = 0; r < 3; r++) {
          const t0 = performance.now();
          await step();
          times.push((performance.now() - t0) / 1000);
        }
        times.sort((a, b) => a - b);
        const seconds = times[1];
        const flops = stepFlops(shape, batch.map((s) => s.tokenIds.length), STEP_TOKENS - batch.length, RANK);
        const gflops = flops / seconds / 1e9;
        emit(`train.step_tokens_per_s.bench50m.seq${seq}`, STEP_TOKENS / seconds, 'tokens/s');
        emit(`train.step_seconds.bench50m.seq${seq}`, seconds, 's');
        emit(`train.gflops.bench50m.seq${seq}`, gflops, 'GFLOP/s');
        emit(`train.fraction_of_gemm_peak.bench50m.seq${seq}`, gflops / peak, 'ratio');
        if (torch) {
          const peer = torchStep(shape, seq, threads);
          emit(`train.torch_peer.step_tokens_per_s.bench50m.seq${seq}`, peer, 'tokens/s');
          emit(`train.speedup_over_torch.bench50m.seq${seq}`, STEP_TOKENS / seconds / peer, 'ratio');
        }
      }
      trainer.close();
    } finally {
      model.close();
    }
    emit('train.peak_rss', process.resourceUsage().maxRSS / 1024, 'MiB');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
