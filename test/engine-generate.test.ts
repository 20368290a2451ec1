/**
 * Generation on the native engine (random qwen3 folder with the real vocabulary size): determinism by seed,
 * stop tokens, max_tokens, n > 1 sharing one prefill, concurrent requests joining shared decode steps,
 * per-request adapters, abort, and the contract that every returned logprob is log π at temperature 1 —
 * checked against score() of the same tokens (the packed no-cache forward), |Δ| <= 1e-4.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel } from '../scripts/random-model.js';
import { EngineError, Model, type GeneratedSequence, type GenerateRequest, type PrefixCacheStats } from '../src/engine/model.js';
import { Trainer, type TrainSequence } from '../src/engine/trainer.js';

const dir = mkdtempSync(join(tmpdir(), 'mcprl-gen-'));
let model: Model;
const PROMPT = [151644, 872, 198, 9707, 11, 1879, 0];

beforeAll(async () => {
  const opts = { arch: 'qwen3' as const, seed: 5, tokenizer: false };
  await makeRandomModel(join(dir, 'm'), opts);
  await makeRandomAdapter(join(dir, 'a1'), opts, { seed: 6 });
  await makeRandomAdapter(join(dir, 'a2'), opts, { seed: 7, targetModules: ['q_proj', 'down_proj'], alpha: 32 });
  model = await Model.load(join(dir, 'm'), { threads: 2 });
  await model.loadAdapter('a1', join(dir, 'a1'));
  await model.loadAdapter('a2', join(dir, 'a2'));
});

afterAll(() => {
  model?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** max |generated logprob - score()| over the samples, scoring prompt + tokens under `adapter`. */
async function maxScoreGap(prompt: number[], seqs: GeneratedSequence[], adapter: string | null): Promise<number> {
  const scored = await model.score(seqs.map((s) => [...prompt, ...s.tokenIds]), { adapter });
  let max = 0;
  seqs.forEach((s, i) => s.logprobs.forEach((lp, t) => (max = Math.max(max, Math.abs(lp - scored[i][prompt.length + t])))));
  return max;
}

/**
 * Same tokens and finish reasons; logprobs within 1e-5 (a batch of different size may take another GEMM
 * blocking, so the f32 sums round differently, ~1e-6).
 */
/** The same tokens and bit-identical logprobs: decoding is batch-invariant (native/kernels/gemm.h, row-wise mode). */
function expectSame(a: GeneratedSequence[], b: GeneratedSequence[]): void {
  const view = (x: GeneratedSequence[]) => x.map((s) => ({ tokenIds: s.tokenIds, finishReason: s.finishReason, logprobs: s.logprobs, samplerLogprobs: s.samplerLogprobs }));
  expect(view(a)).toEqual(view(b));
}

const sampled = (seed: number, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  promptIds: PROMPT,
  sampling: { maxTokens: 6, temperature: 0.9, topP: 0.95, topK: 50, seed },
  ...extra,
});

describe('engine generation', () => {
  it('reads EOS ids from config.json and generation_config.json', () => {
    expect(new Set(model.config.eosTokenIds)).toEqual(new Set([151645, 151643]));
    expect(model.config.modelType).toBe('qwen3');
    expect(model.config.headDim).toBe(32);
  });

  it('is deterministic by seed, and different seeds give different samples', async () => {
    const a = await model.generate(sampled(42));
    const b = await model.generate(sampled(42));
    const c = await model.generate(sampled(43));
    expect(a).toEqual(b);
    expect(a[0].tokenIds).not.toEqual(c[0].tokenIds);
    expect(a[0].tokenIds).toHaveLength(6);
    expect(a[0].finishReason).toBe('length');
  });

  it('returns log π at temperature 1 (== score of the same tokens), whatever temperature/top-k/top-p', async () => {
    const hot = await model.generate({ promptIds: PROMPT, n: 3, sampling: { maxTokens: 8, temperature: 1.7, topK: 5, seed: 1 } });
    const cold = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 8, temperature: 0 } });
    expect(await maxScoreGap(PROMPT, hot, null)).toBeLessThanOrEqual(1e-4);
    expect(await maxScoreGap(PROMPT, cold, null)).toBeLessThanOrEqual(1e-4);
  });

  it('top_k = 1 and a tiny top_p both reduce sampling to greedy', async () => {
    const [g] = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 4, temperature: 0 } });
    const [k1] = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 4, temperature: 1.5, topK: 1, seed: 9 } });
    const [p0] = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 4, temperature: 1.5, topP: 1e-6, seed: 9 } });
    expect(k1.tokenIds).toEqual(g.tokenIds);
    expect(p0.tokenIds).toEqual(g.tokenIds);
  });

  it('stops on a stop token (included, with its logprob) and on max_tokens', async () => {
    const [free] = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 10, temperature: 0 } });
    let k = 0;
    for (let i = 0; i < free.tokenIds.length; i++) if (free.tokenIds.indexOf(free.tokenIds[i]) === i) k = i;
    const stop = free.tokenIds[k];
    const [stopped] = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 10, temperature: 0, stopTokenIds: [stop] } });
    expect(stopped.finishReason).toBe('stop');
    expect(stopped.tokenIds).toEqual(free.tokenIds.slice(0, k + 1));
    expect(stopped.logprobs).toEqual(free.logprobs.slice(0, k + 1));
    const [short] = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 2, temperature: 0 } });
    // Greedy decoding draws from the model's own distribution at temperature 1: both logprobs agree.
    expect(short).toEqual({ tokenIds: free.tokenIds.slice(0, 2), logprobs: free.logprobs.slice(0, 2), samplerLogprobs: free.logprobs.slice(0, 2), finishReason: 'length' });
    const [none] = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 0 } });
    expect(none).toEqual({ tokenIds: [], logprobs: [], samplerLogprobs: [], finishReason: 'length' });
  });

  it('n samples share the prefill: greedy samples equal n = 1; sampled ones keep exact logprobs', async () => {
    const [one] = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 5, temperature: 0 } });
    const three = await model.generate({ promptIds: PROMPT, n: 3, sampling: { maxTokens: 5, temperature: 0 } });
    expectSame(three, [one, one, one]);
    const four = await model.generate({ promptIds: PROMPT, n: 4, adapter: 'a1', sampling: { maxTokens: 5, seed: 3 } });
    expect(new Set(four.map((s) => s.tokenIds.join(','))).size).toBeGreaterThan(1);
    expect(await maxScoreGap(PROMPT, four, 'a1')).toBeLessThanOrEqual(1e-4);
  });

  it('concurrent requests join shared decode steps and give the same results as alone', async () => {
    const reqs = [sampled(1), sampled(2, { promptIds: [5, 6, 7] }), sampled(3, { adapter: 'a2' })];
    const alone: GeneratedSequence[][] = [];
    for (const r of reqs) alone.push(await model.generate(r));
    const events: string[] = [];
    let late: Promise<GeneratedSequence[]> | undefined;
    const lateReq = sampled(4, { promptIds: [9, 10] });
    const together = await Promise.all(
      reqs.map((r, i) =>
        model.generate({
          ...r,
          onToken: (_s, _tok, _lp) => {
            events.push(`r${i}`);
            // A request arriving mid-way joins the running batch (continuous batching).
            if (i === 0 && events.filter((e) => e === 'r0').length === 2)
              late = model.generate({ ...lateReq, onToken: () => events.push('late') });
          },
        }),
      ),
    );
    const lateRes = await late!;
    together.forEach((t, i) => expectSame(t, alone[i]));
    expectSame(lateRes, await model.generate(lateReq));
    // Interleaved tokens prove shared steps: r1 and r2 got tokens before r0 finished; 'late' too.
    const lastR0 = events.lastIndexOf('r0');
    expect(events.indexOf('r1')).toBeLessThan(lastR0);
    expect(events.indexOf('r2')).toBeLessThan(lastR0);
    expect(events.indexOf('late')).toBeLessThan(lastR0);
  });

  it('gives a request bit-identical tokens and logprobs alone and in a decode batch of twelve', async () => {
    // More than eight rows share each decode step here: the row count at which the GEMM kernel used to change.
    const reqs = Array.from({ length: 12 }, (_, k) => sampled(20 + k, { promptIds: [...PROMPT, 100 + k, 7 * k + 3], sampling: { maxTokens: 12, temperature: 0.9, seed: 20 + k } }));
    const together = await Promise.all(reqs.map((r) => model.generate(r)));
    for (const k of [0, 5, 11]) expectSame(together[k], await model.generate(reqs[k]));
  });

  it('reports top alternatives without changing what is sampled, bit-identical alone and in a batch', async () => {
    const top = (k: number): GenerateRequest => sampled(60 + k, { promptIds: [...PROMPT, 200 + k], sampling: { maxTokens: 8, temperature: 0.8, topK: 40, seed: 60 + k, topLogprobs: 5 } });
    const plain = await model.generate({ ...top(0), sampling: { ...top(0).sampling, topLogprobs: 0 } });
    const [alone] = await model.generate(top(0));
    // Asking for alternatives draws nothing from the RNG: the same tokens and logprobs as without.
    expectSame([alone], plain);
    expect(plain[0].topLogprobs).toBeUndefined();
    expect(alone.topLogprobs).toHaveLength(alone.tokenIds.length);
    alone.topLogprobs!.forEach((alts, t) => {
      expect(alts).toHaveLength(5);
      // Most likely first; the sampled token, when among them, has exactly its own logprob.
      for (let i = 1; i < 5; i++) expect(alts[i].logprob).toBeLessThanOrEqual(alts[i - 1].logprob);
      const own = alts.find((a) => a.tokenId === alone.tokenIds[t]);
      if (own) expect(own.logprob).toBe(alone.logprobs[t]);
      else expect(alone.logprobs[t]).toBeLessThanOrEqual(alts[4].logprob);
    });
    // Eleven others (some without alternatives) in the same decode steps: the alternatives are the same bits.
    const together = await Promise.all([top(0), ...Array.from({ length: 11 }, (_, k) => (k % 2 ? top(k + 1) : sampled(80 + k)))].map((r) => model.generate(r)));
    expect(together[0][0].topLogprobs).toEqual(alone.topLogprobs);
    expectSame(together[0], [alone]);
  });

  it('selects the adapter per request within one batch', async () => {
    const adapters = ['a1', 'a2', null] as const;
    const res = await Promise.all(adapters.map((adapter) => model.generate({ promptIds: PROMPT, adapter, sampling: { maxTokens: 6, seed: 11 } })));
    for (const [i, adapter] of adapters.entries()) {
      expect(await maxScoreGap(PROMPT, res[i], adapter)).toBeLessThanOrEqual(1e-4);
      const other = adapters[(i + 1) % 3];
      expect(await maxScoreGap(PROMPT, res[i], other)).toBeGreaterThan(1e-3);
    }
  });

  it('aborts on the signal, keeping the tokens so far', async () => {
    const ac = new AbortController();
    let count = 0;
    const [s] = await model.generate({ promptIds: PROMPT, signal: ac.signal, sampling: { maxTokens: 50, seed: 2 }, onToken: () => ++count === 3 && ac.abort() });
    expect(s.finishReason).toBe('abort');
    expect(s.tokenIds).toHaveLength(3);
    const pre = new AbortController();
    pre.abort();
    expect(await model.generate({ promptIds: PROMPT, n: 2, signal: pre.signal, sampling: { maxTokens: 5 } })).toEqual([
      { tokenIds: [], logprobs: [], samplerLogprobs: [], finishReason: 'abort' },
      { tokenIds: [], logprobs: [], samplerLogprobs: [], finishReason: 'abort' },
    ]);
  });

  it('rejects bad requests with EngineError and keeps serving', async () => {
    await expect(model.generate({ promptIds: PROMPT, adapter: 'nope', sampling: { maxTokens: 2 } })).rejects.toMatchObject({ code: 'ENGINE_REQUEST', message: expect.stringMatching(/unknown adapter 'nope'/) });
    await expect(model.generate({ promptIds: [151936], sampling: { maxTokens: 2 } })).rejects.toBeInstanceOf(EngineError);
    await expect(model.generate({ promptIds: [], sampling: { maxTokens: 2 } })).rejects.toThrow(/empty prompt/);
    await expect(model.score([[1, -1]])).rejects.toThrow(/out of range/);
    expect(() => model.unloadAdapter('a1')).not.toThrow();
    await expect(model.score([[1, 2]], { adapter: 'a1' })).rejects.toThrow(/unknown adapter 'a1'/);
    await model.loadAdapter('a1', join(dir, 'a1'));
    const [ok] = await model.generate({ promptIds: PROMPT, sampling: { maxTokens: 1, temperature: 0 } });
    expect(ok.tokenIds).toHaveLength(1);
  });

  it('a closed model rejects calls with ENGINE_CLOSED', async () => {
    const m2 = await Model.load(join(dir, 'm'), { threads: 1 });
    m2.close();
    await expect(m2.score([[1, 2]])).rejects.toMatchObject({ code: 'ENGINE_CLOSED' });
    await expect(m2.generate({ promptIds: [1], sampling: { maxTokens: 1 } })).rejects.toMatchObject({ code: 'ENGINE_CLOSED' });
  });
});

/** `n` token ids from a seeded LCG (ordinary vocabulary ids, below the special tokens). */
function ids(n: number, seed: number): number[] {
  let x = seed >>> 0;
  return Array.from({ length: n }, () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) % 150000));
}

// Prompts over several 64-token blocks (native/engine/prefix_cache.h): P; P extended as a next turn would be; P cut at a
// block boundary and inside a block; another prompt altogether. P5 ends 4 tokens past a block of P: after a hit
// only those 4 rows are computed, where the cold prompt's rows come out of one forward of 132 rows — the same bits
// only because prefill runs in the GEMM's blocked mode (a product of at most 8 rows otherwise takes another kernel,
// and OpenBLAS rounds by row count: native/kernels/gemm.h).
const P = ids(200, 1);
const PROMPTS = { P, P2: [...P, ...ids(60, 2)], P3: P.slice(0, 192), P4: P.slice(0, 150), P5: P.slice(0, 132), Q: ids(130, 3) };

describe('prefix cache', () => {
  let cold: Model;
  let warm: Model;
  beforeAll(async () => {
    // The oracle: the same engine with the cache off (prefill in the same aligned chunks, nothing reused).
    cold = await Model.load(join(dir, 'm'), { threads: 2, prefixCacheMib: 0 });
    warm = await Model.load(join(dir, 'm'), { threads: 2 });
    for (const m of [cold, warm]) {
      await m.loadAdapter('a1', join(dir, 'a1'));
      await m.loadAdapter('a2', join(dir, 'a2'));
    }
  });
  afterAll(() => {
    cold?.close();
    warm?.close();
  });

  /** What `f` adds to the warm model's counters. */
  async function delta(f: () => Promise<unknown>): Promise<PrefixCacheStats> {
    const a = warm.prefixCacheStats();
    await f();
    const b = warm.prefixCacheStats();
    return Object.fromEntries(Object.entries(b).map(([k, v]) => [k, v - a[k as keyof PrefixCacheStats]])) as unknown as PrefixCacheStats;
  }

  const reqs: GenerateRequest[] = [
    sampled(30, { promptIds: PROMPTS.P }),
    sampled(31, { promptIds: PROMPTS.P2 }),
    sampled(32, { promptIds: PROMPTS.P3 }),
    sampled(33, { promptIds: PROMPTS.P4 }),
    sampled(38, { promptIds: PROMPTS.P5 }),
    sampled(34, { promptIds: PROMPTS.Q }),
    sampled(35, { promptIds: PROMPTS.P, adapter: 'a1' }),
    sampled(36, { promptIds: PROMPTS.P2, adapter: 'a1', n: 3 }),
    sampled(37, { promptIds: PROMPTS.P, adapter: 'a2' }),
  ];

  it('gives bit-identical tokens and logprobs with the cache off, cold and warm, in any order and batch', async () => {
    const oracle: GeneratedSequence[][] = [];
    for (const r of reqs) oracle.push(await cold.generate(r));
    // Cold, one by one: each prompt hits what the ones before it left.
    for (let i = 0; i < reqs.length; i++) expectSame(await warm.generate(reqs[i]), oracle[i]);
    // Warm, in reverse order, then all at once (one admission: later prompts hit blocks the earlier ones inserted).
    for (let i = reqs.length - 1; i >= 0; i--) expectSame(await warm.generate(reqs[i]), oracle[i]);
    const together = await Promise.all(reqs.map((r) => warm.generate(r)));
    together.forEach((t, i) => expectSame(t, oracle[i]));
    expect(warm.prefixCacheStats().hitTokens).toBeGreaterThan(0);
    expect(cold.prefixCacheStats()).toMatchObject({ hitTokens: 0, blocks: 0, bytes: 0 });
  });

  it('counts hits: a repeated prompt prefills nothing, a longer one only its new chunks, another adapter all', async () => {
    await warm.setPrefixCache(0);
    await warm.setPrefixCache(64);
    const gen = (promptIds: number[], adapter: string | null = null) => delta(() => warm.generate({ promptIds, adapter, sampling: { maxTokens: 2, temperature: 0 } }));
    expect(await gen(PROMPTS.P)).toMatchObject({ prompts: 1, promptTokens: 200, hitTokens: 0, prefilledTokens: 200, insertedBlocks: 4 });
    expect(await gen(PROMPTS.P)).toMatchObject({ hitTokens: 200, hitBlocks: 4, prefilledTokens: 0, insertedBlocks: 0 });
    // 3 full blocks of P; its last, partial block is P's own (a longer prompt computes that chunk whole).
    expect(await gen(PROMPTS.P2)).toMatchObject({ hitTokens: 192, hitBlocks: 3, prefilledTokens: 68, insertedBlocks: 2 });
    expect(await gen(PROMPTS.P3)).toMatchObject({ hitTokens: 192, prefilledTokens: 0 });
    expect(await gen(PROMPTS.P4)).toMatchObject({ hitTokens: 128, prefilledTokens: 22 });
    expect(await gen(PROMPTS.P, 'a1')).toMatchObject({ hitTokens: 0, prefilledTokens: 200 });
    // n samples share one prefill (and the cache's blocks).
    expect(await delta(() => warm.generate({ promptIds: PROMPTS.P2, n: 4, sampling: { maxTokens: 2, seed: 1 } }))).toMatchObject({ prompts: 1, hitTokens: 260 });
    const s = warm.prefixCacheStats();
    expect(s).toMatchObject({ blockTokens: 64, capacityBytes: 64 * 2 ** 20 });
    expect(s.bytes).toBeGreaterThan(0);
    // Off: nothing kept, nothing hit, and the memory is given back.
    await warm.setPrefixCache(0);
    expect(warm.prefixCacheStats()).toMatchObject({ blocks: 0, bytes: 0 });
    expect(await gen(PROMPTS.P)).toMatchObject({ hitTokens: 0, prefilledTokens: 200 });
    await warm.setPrefixCache(64);
  });

  it('never reuses blocks of an adapter replaced under its name or trained since', async () => {
    const req = sampled(40, { promptIds: PROMPTS.P2, adapter: 'a1' });
    await warm.generate(req);
    // a1 replaced by a2's weights, on both engines: the warm one must not use the old a1's blocks.
    for (const m of [cold, warm]) await m.loadAdapter('a1', join(dir, 'a2'));
    const replaced = await cold.generate(req);
    let got: GeneratedSequence[] = [];
    expect(await delta(async () => (got = await warm.generate(req)))).toMatchObject({ hitTokens: 0 });
    expectSame(got, replaced);
    // The trainer's adapter is trained in place, under one name.
    const opts = { adapterName: 'tr', rank: 4, alpha: 8, targets: ['q_proj', 'v_proj', 'down_proj'], seed: 3, optimizer: { lr: 5e-2 } };
    const trainers = [await Trainer.create(cold, opts), await Trainer.create(warm, opts)];
    const trReq = sampled(41, { promptIds: PROMPTS.P2, adapter: 'tr' });
    await warm.generate(trReq);
    expect(await delta(() => warm.generate(trReq))).toMatchObject({ hitTokens: 260 });
    const batch: TrainSequence[] = [{ tokenIds: PROMPTS.P.slice(0, 40), mask: PROMPTS.P.slice(0, 40).map((_, t) => (t >= 20 ? 1 : 0)) }];
    for (const t of trainers) await t.sftStep(batch);
    const trained = await cold.generate(trReq);
    expect(await delta(async () => (got = await warm.generate(trReq)))).toMatchObject({ hitTokens: 0, prefilledTokens: 260 });
    expectSame(got, trained);
    for (const t of trainers) t.close();
    for (const m of [cold, warm]) await m.loadAdapter('a1', join(dir, 'a1'));
  });

  it('stays within a small budget by dropping least recently used blocks, with the same results', async () => {
    // 1 MiB holds about 15 of this model's 64 KiB blocks; these prompts need 36.
    await warm.setPrefixCache(1);
    const many = Array.from({ length: 12 }, (_, k) => sampled(50 + k, { promptIds: [...PROMPTS.P.slice(0, 64 * (k % 3)), ...ids(130, 100 + k)] }));
    const d = await delta(async () => {
      for (const r of many) expectSame(await warm.generate(r), await cold.generate(r));
    });
    expect(d.evictedBlocks).toBeGreaterThan(0);
    expect(d.hitBlocks).toBeGreaterThan(0);
    const s = warm.prefixCacheStats();
    expect(s.bytes).toBeLessThanOrEqual(2 ** 20);
    await warm.setPrefixCache(64);
  });
});

// A prompt's last hidden state, and so its next-token distribution, is the same bits however its prefill is split:
// in one call, or in pieces of s rows for every s from 1 to its length, each piece a prefill of its own into the
// same slot (a slot that holds tokens continues uncached). A first piece of 64 rows or more copies the cache's block
// of the first 64 tokens and computes the rest. Without the GEMM's blocked mode (native/kernels/gemm.h) pieces of at most 8
// rows would take the dot-product kernel and OpenBLAS's rows would round by the row count.
describe('prefill split into pieces', () => {
  const prompt = ids(83, 9);
  type Last = { tokens: number[]; logprobs: number[]; topIds: number[]; topLogprobs: number[] };
  const wholeByThreads: Last[] = [];

  it.each([1, 2])('gives bit-identical last logits for every split of an 83-token prompt into pieces of 1..83 rows, on %i thread(s)', async (threads) => {
    const m = await Model.load(join(dir, 'm'), { threads });
    try {
      await m.loadAdapter('a1', join(dir, 'a1'));
      for (const adapter of [null, 'a1']) {
        const last = (pieces: number[][]): Promise<Last> =>
          m.run(async (e) => {
            const slot = e.slotCreate(prompt.length + 1);
            try {
              for (const p of pieces) await e.prefill(Int32Array.of(slot), Int32Array.from(p), Int32Array.of(p.length), [adapter]);
              // Greedy, with the 20 most likely tokens' log-probabilities: 20 entries of the last row's logits.
              const r = await e.sample(Int32Array.of(slot), { temperature: Float32Array.of(0), topP: Float32Array.of(1), topK: Int32Array.of(0), topLogprobs: Int32Array.of(20), maskIdx: null, masks: null });
              return { tokens: [...r.tokens], logprobs: [...r.logprobs], topIds: [...r.topIds], topLogprobs: [...r.topLogprobs] };
            } finally {
              e.slotFree(slot);
            }
          });
        const whole = await last([prompt]);
        expect(whole.topIds).toHaveLength(20);
        for (let s = 1; s <= prompt.length; s++) {
          const pieces: number[][] = [];
          for (let i = 0; i < prompt.length; i += s) pieces.push(prompt.slice(i, i + s));
          expect(await last(pieces), `${adapter ?? 'base'}, pieces of ${s}`).toEqual(whole);
        }
        if (adapter === null) wholeByThreads.push(whole);
      }
      expect(m.prefixCacheStats().hitTokens).toBeGreaterThan(0);
    } finally {
      m.close();
    }
  });

  it('gives the same bits on 1 and 2 threads', () => {
    expect(wholeByThreads).toHaveLength(2);
    expect(wholeByThreads[1]).toEqual(wholeByThreads[0]);
  });
});
