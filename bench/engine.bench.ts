/**
 * Native engine figures: sgemm GFLOP/s (portable kernel vs OpenBLAS, n = 2048), and prefill / decode
 * tokens per second on a ~50M-parameter random Qwen3-shaped model (scripts/random-model.ts BENCH_50M:
 * hidden 256, 4 layers, 8 heads / 4 kv heads, head_dim 32, intermediate 768, the real 151,936-token
 * vocabulary with tied embeddings, which is most of the parameters).
 *
 * prefill: one 512-token prompt, generate with maxTokens 1 (forward + first sample), best of 5.
 * decode: the 64 tokens decoded after the first by each request / (time of maxTokens 65 - time of maxTokens 1), with
 * 1 or 16 concurrent requests (16 requests share each decode step: continuous batching). EOS is masked out of the
 * sampled set (a token constraint), so that every request decodes all its tokens: the trained tiny model stops
 * within a few tokens otherwise, which left nothing to time.
 *
 * The same two figures on the bundled tiny model (fixtures/models/tiny-bookshop: hidden 128, 4 layers, vocabulary
 * 1024), at the demo's shapes: a 431-token prompt (a rollout's later turn), and 32 requests over ~300-token
 * prompts decoding together. Its attention and small GEMMs are what `npm run demo` spends its time in.
 * These figures measure computing: the prefix cache is off for them (a repeated prompt would hit it).
 *
 * prefix cache (src/engine/prefix-cache.ts), on both models: a GRPO group — 8 concurrent requests with the same
 * 400-token prompt, maxTokens 1 — in prompt tokens per second, with the cache off, on but empty (the group's first
 * request prefills, the other seven copy its blocks) and warm (the prompt cached before: all eight copy).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BENCH_50M, makeRandomModel, makeRng } from '../scripts/random-model.js';
import { Model, type GenerateRequest } from '../src/engine/model.js';
import { loadNative } from '../src/engine/native.js';
import { loadNativeTesting } from '../src/engine/native-testing.js';
import type { Emit } from './run.js';

async function time(fn: () => Promise<unknown>, reps = 1): Promise<number> {
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    await fn();
    best = Math.min(best, (performance.now() - t0) / 1000);
  }
  return best;
}

/** A group of 8 requests sharing `prompt` (maxTokens 1): prompt tokens/s with the prefix cache off, empty, warm. */
async function groupBench(emit: Emit, model: Model, prefix: string, prompt: number[]): Promise<void> {
  const group = () => Promise.all(Array.from({ length: 8 }, (_, i) => model.generate({ promptIds: prompt, sampling: { maxTokens: 1, seed: i } })));
  const tokens = 8 * prompt.length;
  await model.setPrefixCache(0);
  emit(`${prefix}.group8x${prompt.length}tok.cache_off`, tokens / (await time(group, 3)), 'tok/s');
  const empty = await time(async () => {
    await model.setPrefixCache(0);
    await model.setPrefixCache(64);
    await group();
  }, 3);
  emit(`${prefix}.group8x${prompt.length}tok.cache_empty`, tokens / empty, 'tok/s');
  emit(`${prefix}.group8x${prompt.length}tok.cache_warm`, tokens / (await time(group, 3)), 'tok/s');
  await model.setPrefixCache(0);
}

/** A token constraint that allows every token but the model's EOS ids (a sample then never stops early). */
function noEos(m: Model): Pick<GenerateRequest, 'constraint'> {
  const mask = new Uint32Array(Math.ceil(m.config.vocabSize / 32)).fill(0xffffffff);
  for (const e of m.config.eosTokenIds) mask[e >> 5] &= ~(1 << (e & 31));
  return { constraint: () => ({ allowed: () => mask, advance: () => {} }) };
}

export default async function engineBench(emit: Emit): Promise<void> {
  const addon = loadNative();
  const threads = addon.info().maxThreads;
  emit('engine.threads', threads, 'threads');
  const ops = loadNativeTesting();
  emit('gemm.portable.n2048', await ops.gemmBench(2048, 'portable', 3), 'GFLOP/s');
  if (ops.info().openblas) emit('gemm.openblas.n2048', await ops.gemmBench(2048, 'blas', 3), 'GFLOP/s');

  const dir = mkdtempSync(join(tmpdir(), 'mcprl-bench-'));
  try {
    const modelOpts = { ...BENCH_50M, arch: 'qwen3' as const, seed: 1, tokenizer: false };
    await makeRandomModel(dir, modelOpts);
    const model = await Model.load(dir, { threads, prefixCacheMib: 0 });
    const c = model.config;
    const params = c.vocabSize * c.hiddenSize + c.numLayers * (c.hiddenSize * c.headDim * (2 * c.numHeads + 2 * c.numKvHeads) + 3 * c.hiddenSize * c.intermediateSize);
    emit('engine.model.params', params / 1e6, 'M');
    const rng = makeRng(7);
    const prompt = (n: number) => Array.from({ length: n }, () => Math.floor(rng.uniform() * c.vocabSize));

    const p512 = prompt(512);
    const tPrefill = await time(() => model.generate({ promptIds: p512, sampling: { maxTokens: 1, temperature: 0 } }), 5);
    emit('engine.prefill.512tok.batch1', 512 / tPrefill, 'tok/s');
    const seqs = Array.from({ length: 8 }, () => prompt(256));
    const tScore = await time(() => model.score(seqs), 2);
    emit('engine.score.8x256tok', (8 * 256) / tScore, 'tok/s');

    const decode: number[] = [];
    for (const batch of [1, 16]) {
      const prompts = Array.from({ length: batch }, () => prompt(16));
      const whole = noEos(model);
      const run = (maxTokens: number) =>
        Promise.all(prompts.map((p, i) => model.generate({ promptIds: p, sampling: { maxTokens, seed: i }, ...whole })));
      const t1 = await time(() => run(1), 3);
      const t65 = await time(() => run(65), 3);
      decode.push((64 * batch) / (t65 - t1));
      emit(`engine.decode.batch${batch}`, decode.at(-1)!, 'tok/s');
    }
    emit('engine.decode.batch16_over_batch1', decode[1] / decode[0], 'ratio');
    await groupBench(emit, model, 'engine', prompt(400));
    model.close();

    const tiny = await Model.load(join(import.meta.dirname, '..', 'fixtures', 'models', 'tiny-bookshop'), { threads, prefixCacheMib: 0 });
    const tprompt = (n: number) => Array.from({ length: n }, () => Math.floor(rng.uniform() * tiny.config.vocabSize));
    const p431 = tprompt(431);
    const tTiny = await time(() => tiny.generate({ promptIds: p431, sampling: { maxTokens: 1, temperature: 0 } }), 10);
    emit('engine.tiny.prefill.431tok', 431 / tTiny, 'tok/s');
    const tPrompts = Array.from({ length: 32 }, (_, i) => tprompt(300 + i));
    const tWhole = noEos(tiny);
    const tRun = (maxTokens: number) => Promise.all(tPrompts.map((p, i) => tiny.generate({ promptIds: p, sampling: { maxTokens, seed: i }, ...tWhole })));
    const u1 = await time(() => tRun(1), 3);
    const u65 = await time(() => tRun(65), 3);
    emit('engine.tiny.decode.batch32', (64 * 32) / (u65 - u1), 'tok/s');
    await groupBench(emit, tiny, 'engine.tiny', tprompt(400));
    tiny.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
