/**
 * On-policy exactness: the log-probability the sampler records for each token and the one the trainer computes
 * for it must be of the same distribution — logits ÷ the sampling temperature, renormalised over the tokens a
 * constraint allowed — so that GRPO's importance ratio is 1 on the first minibatch (no update in between).
 *
 * A random qwen3 model with a random adapter samples at temperature 0.7 (top-p 0.95, which changes which tokens
 * are drawn but not their recorded distribution) under a constraint that allows a seeded subset of 48 tokens at
 * every other step. The trainer, given the same temperature and masks, reproduces the sampler's logprobs:
 *   - mean importance ratio within 1e-6 of 1;
 *   - every token's |log π_trainer − log π_sampler| ≤ 2e-4 nats (decode with a KV cache and the packed training
 *     forward sum in different orders; measured about 1e-5);
 * and the test is not vacuous: ignoring the masks or the temperature moves the mean |Δ| above 0.05 nats.
 * Model.score given the same temperatures and masks reproduces them within the same 2e-4 nats.
 *
 * Then the same with the real constraint (src/chat/constrain.ts) on the bundled tiny model: eight completions
 * at temperature 0.7 with constrained tool calls, tokenised as training does (the constraint replayed over the
 * sampled tokens), give a mean ratio within 1e-6 of 1 (measured 3e-7); a trainer ignoring the masks would score
 * the constrained tokens lower (measured: 296 nats in total over 237 masked tokens; asserted > 1e-3).
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel, makeRng, type RandomModelOptions } from '../scripts/random-model.js';
import type { ChatMessage, OpenAITool } from '../src/agent/policy.js';
import { COMPLETE_TASK_TOOL } from '../src/agent/rollout.js';
import { ChatEngine } from '../src/chat/chat-engine.js';
import { Model, type TokenConstraint } from '../src/engine/model.js';
import { Trainer, type TrainSequence } from '../src/engine/trainer.js';
import { trajectoryToSequences } from '../src/train/tokenize.js';
import { maskOf } from './train-helpers.js';

const VOCAB = 512;
const TEMPERATURE = 0.7;
const RATIO_TOL = 1e-6;
const TOKEN_TOL = 2e-4;

let scratch: string;
let model: Model;
let trainer: Trainer;
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'mcprl-sampler-ratio-'));
  const opts: RandomModelOptions = { arch: 'qwen3', vocabSize: VOCAB, tokenizer: false, seed: 4, std: 0.3 };
  await makeRandomModel(join(scratch, 'model'), opts);
  await makeRandomAdapter(join(scratch, 'adapter'), opts, { rank: 4, alpha: 8, seed: 9 });
  model = await Model.load(join(scratch, 'model'), { threads: 2 });
  trainer = await Trainer.resume(model, join(scratch, 'adapter'), { adapterName: 'policy', optimizer: { lr: 1e-3 } });
});
afterAll(async () => {
  model?.close();
  await rm(scratch, { recursive: true, force: true });
});

/** Allows a seeded set of 48 tokens at even steps and every token at odd ones; remembers what it allowed. */
class EveryOtherStep implements TokenConstraint {
  readonly used: (Uint32Array | null)[] = [];
  private step = 0;
  constructor(private readonly rng: ReturnType<typeof makeRng>) {}
  allowed(): Uint32Array | null {
    let m: Uint32Array | null = null;
    if (this.step % 2 === 0) {
      const ids = new Set<number>();
      while (ids.size < 48) ids.add(Math.floor(this.rng.uniform() * VOCAB));
      m = maskOf(VOCAB, ids);
    }
    this.used[this.step] = m;
    return m;
  }
  advance(): void {
    this.step++;
  }
}

describe('the sampler and the trainer score the same distribution', () => {
  it('gives an importance ratio of 1 on the first minibatch at temperature 0.7 with masked steps', async () => {
    const rng = makeRng(3);
    const prompt = Array.from({ length: 6 }, () => Math.floor(rng.uniform() * VOCAB));
    const constraints: EveryOtherStep[] = [];
    const seqs = await model.generate({
      promptIds: prompt,
      n: 4,
      adapter: 'policy',
      sampling: { maxTokens: 24, temperature: TEMPERATURE, topP: 0.95, seed: 11 },
      constraint: (i) => (constraints[i] = new EveryOtherStep(makeRng(100 + i))),
    });
    const batch: TrainSequence[] = seqs.map((s, i) => {
      expect(s.tokenIds.length).toBe(24);
      // Every constrained token was drawn from its allowed set.
      s.tokenIds.forEach((tok, k) => {
        const m = constraints[i].used[k];
        if (m) expect((m[tok >>> 5] >>> (tok & 31)) & 1).toBe(1);
      });
      return {
        tokenIds: [...prompt, ...s.tokenIds],
        mask: [...prompt.map(() => 0), ...s.tokenIds.map(() => 1)],
        advantage: i % 2 ? 1 : -1,
        oldLogprobs: [...prompt.map(() => 0), ...s.samplerLogprobs],
        temperature: TEMPERATURE,
        tokenMasks: [...prompt.map(() => null), ...constraints[i].used],
      };
    });
    expect(constraints.every((c) => c.used.length === 24)).toBe(true);

    const exact = await trainer.gradientsWithMetrics(batch, { kind: 'grpo' });
    expect(Math.abs(exact.metrics.meanRatio - 1)).toBeLessThanOrEqual(RATIO_TOL);
    const old = batch.flatMap((s) => s.oldLogprobs!.filter((_, t) => s.mask[t]));
    const diffs = Array.from(exact.logprobs, (lp, j) => Math.abs(lp - old[j]));
    expect(Math.max(...diffs)).toBeLessThanOrEqual(TOKEN_TOL);

    // Sensitivity: the trainer ignoring the masks, or the temperature, computes another distribution.
    const meanDiff = async (b: TrainSequence[]) => {
      const lp = (await trainer.gradientsWithMetrics(b, { kind: 'grpo' })).logprobs;
      return Array.from(lp, (x, j) => Math.abs(x - old[j])).reduce((a, d) => a + d, 0) / lp.length;
    };
    expect(await meanDiff(batch.map(({ tokenMasks: _m, ...s }) => s))).toBeGreaterThan(0.05);
    expect(await meanDiff(batch.map(({ temperature: _t, ...s }) => s))).toBeGreaterThan(0.05);

    // Model.score, given the same temperatures and masks, scores that distribution too (what truncated importance
    // sampling compares a rollout server's sampler logprobs with, src/train/off-policy.ts); without them it is
    // the temperature-1, whole-vocabulary log π.
    const score = async (o: { temperatures?: number[]; tokenMasks?: TrainSequence['tokenMasks'][] }) => {
      const lp = await model.score(batch.map((s) => s.tokenIds), { adapter: 'policy', ...o });
      return batch.flatMap((s, i) => Array.from(lp[i]).filter((_, t) => s.mask[t])).map((x, j) => Math.abs(x - old[j]));
    };
    const scored = await score({ temperatures: batch.map(() => TEMPERATURE), tokenMasks: batch.map((s) => s.tokenMasks) });
    expect(Math.max(...scored)).toBeLessThanOrEqual(TOKEN_TOL);
    const plain = await score({});
    expect(plain.reduce((a, d) => a + d, 0) / plain.length).toBeGreaterThan(0.05);
  });
});

const TINY = join(import.meta.dirname, '..', 'fixtures', 'models', 'tiny-bookshop');
const TOOLS: OpenAITool[] = [
  { type: 'function', function: { name: 'get_author', description: 'An author by id.', parameters: { type: 'object', properties: { author_id: { type: 'string', pattern: '^au-\\d{2}$' } }, required: ['author_id'], additionalProperties: false } } },
  { type: 'function', function: { name: 'search_books', description: 'Search.', parameters: { type: 'object', properties: { query: { type: 'string' }, genre: { type: 'string', enum: ['fantasy', 'history', 'science', 'mystery'] }, max_results: { type: 'integer', minimum: 1, maximum: 20 } }, required: ['query'], additionalProperties: false } } },
  { type: 'function', function: { name: 'convert_price', description: 'Convert.', parameters: { type: 'object', properties: { amount: { type: 'number', minimum: 0 }, currency: { type: 'string', enum: ['EUR', 'GBP', 'JPY'] } }, required: ['amount', 'currency'], additionalProperties: false } } },
  COMPLETE_TASK_TOOL,
];

describe.skipIf(!existsSync(join(TINY, 'model.safetensors')))('constrained tool calls on the tiny model', () => {
  it('keeps the ratio at 1 on the first minibatch when the trainer replays the constraint (T = 0.7)', async () => {
    const engine = await ChatEngine.load(TINY, { threads: 2 });
    try {
      const policy = await Trainer.create(engine.model as Model, { adapterName: 'policy', rank: 4, alpha: 8, targets: ['q_proj', 'v_proj'], seed: 1, optimizer: { lr: 1e-3 } });
      const messages: ChatMessage[] = [
        { role: 'system', content: 'You are an agent that completes tasks by calling tools.' },
        { role: 'user', content: 'Find the country of the author au-03, please.' },
      ];
      const res = await engine.complete({
        model: 'policy', messages, tools: TOOLS, constrainToolCalls: true, sampling: { temperature: TEMPERATURE, n: 8, maxTokens: 64, seed: 5 },
      });
      const batch = res.choices.flatMap((c, i) => {
        expect(c.constrained).toBe(true);
        // Every call the constrained model wrote can be read.
        expect(c.invalidToolCalls).toEqual([]);
        const turn: ChatMessage = { role: 'assistant', content: c.content, mcprl: { token_ids: c.tokenIds, logprobs: c.samplerLogprobs, temperature: TEMPERATURE, constrained: true } };
        return trajectoryToSequences(engine, { messages: [...messages, turn], tools: TOOLS }, i % 2 ? 1 : -1);
      });
      const masked = batch.flatMap((s) => (s.tokenMasks ?? []).filter((m) => m)).length;
      expect(masked).toBeGreaterThan(20);
      expect(res.choices.some((c) => c.toolCalls.length > 0)).toBe(true);
      const exact = await policy.gradientsWithMetrics(batch, { kind: 'grpo' });
      expect(Math.abs(exact.metrics.meanRatio - 1)).toBeLessThanOrEqual(RATIO_TOL);
      const old = batch.flatMap((s) => s.oldLogprobs!.filter((_, t) => s.mask[t]));
      expect(Math.max(...Array.from(exact.logprobs, (lp, j) => Math.abs(lp - old[j])))).toBeLessThanOrEqual(TOKEN_TOL);
      // A trainer that ignores the masks scores the constrained tokens lower (the mass outside the allowed sets).
      const unmasked = (await policy.gradientsWithMetrics(batch.map(({ tokenMasks: _m, ...s }) => s), { kind: 'grpo' })).logprobs;
      const gap = Array.from(unmasked, (lp, j) => old[j] - lp).reduce((a, d) => a + d, 0);
      expect(gap).toBeGreaterThan(1e-3);
    } finally {
      engine.model.close();
    }
  });
});
