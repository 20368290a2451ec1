/**
 * §3 of issue 42: the engine bounds its own memory. Generation's KV cache has a byte budget (`kvCacheMib`, slots and
 * prefix cache together); requests beyond it wait for room instead of allocating past it, a request that could never
 * fit is refused with the bytes, and a model whose one sequence at its full context does not fit is refused at load
 * with the bytes needed and available. Real parts: seeded random Qwen3-shaped folders in the real engine, and the
 * real `mcprl serve` command line.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { EngineError, Model } from '../../src/engine/model.js';
import { startServer } from '../../src/serve/server.js';
import { makeRandomModel, type RandomModelOptions } from '../../scripts/random-model.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from '../helpers/servers.js';
import { bookshopScenarios, mcprl } from './cli.js';
import { fault } from './fault-table.js';

// 2 layers × 2 KV heads × head_dim 32 × keys and values × 4 bytes: 1 KiB of cache per token. An EOS id outside the
// vocabulary is never sampled, so every sequence runs to its max tokens.
const SMALL: RandomModelOptions = { arch: 'qwen3', seed: 7, vocabSize: 512, hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 32, intermediateSize: 128, tokenizer: false, eosTokenId: 100_000, bosTokenId: 100_001 };
const TOKEN_BYTES = 2 * 2 * 2 * 32 * 4;
let work: string;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-kv-budget-'));
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

async function folder(name: string, o: Partial<RandomModelOptions>): Promise<string> {
  const dir = path.join(work, name);
  await makeRandomModel(dir, { ...SMALL, ...o });
  return dir;
}

async function loadError(dir: string, kvCacheMib?: number): Promise<EngineError> {
  const m = await Model.load(dir, { threads: 1, ...(kvCacheMib !== undefined ? { kvCacheMib } : {}) }).catch((e: unknown) => e);
  if (m instanceof Model) {
    m.close();
    throw new Error(`loading ${dir} succeeded`);
  }
  expect(m).toBeInstanceOf(EngineError);
  return m as EngineError;
}

describe('the KV cache budget', () => {
  let model: Model;
  // A context of 256 tokens (256 KiB per sequence at most) under a 1 MiB budget; each request below reserves
  // 100 prompt + 28 generated tokens = 128 KiB, so 8 fit at once.
  const BUDGET = 2 ** 20;
  const CAP = 128;
  const FIT = BUDGET / (CAP * TOKEN_BYTES);

  beforeAll(async () => {
    model = await Model.load(await folder('ctx256', { maxPositionEmbeddings: 256 }), { threads: 1, kvCacheMib: 1 });
  });
  afterAll(() => model?.close());

  it(`20 requests at once under a budget for ${FIT}: they wait for room, the cache never passes the budget, all complete`, async () => {
    expect(FIT).toBe(8);
    const prompt = Array.from({ length: 100 }, (_, i) => (i * 7) % 500);
    const runs = Array.from({ length: 20 }, (_, i) =>
      model.generate({ promptIds: [...prompt.slice(0, 99), i], sampling: { maxTokens: CAP - 100, temperature: 1, seed: i } }));
    const out = await Promise.all(runs);
    await model.run(() => undefined); // the last slots are freed by calls queued behind the results
    expect(out.every(([s]) => s.tokenIds.length === CAP - 100 && s.finishReason === 'length')).toBe(true);
    const st = model.kvCacheStats();
    expect(st.budgetBytes).toBe(BUDGET);
    expect(st.peakSlots).toBe(FIT);
    expect(st.peakBytes).toBeLessThanOrEqual(BUDGET);
    expect(st.peakBytes).toBeGreaterThanOrEqual(FIT * CAP * TOKEN_BYTES);
    // Everything given back: no slot is left reserved, and the prefix cache stayed inside the budget's room.
    expect(st.reservedBytes).toBe(0);
    expect(st.slots).toBe(0);
    expect(model.prefixCacheStats().hitTokens).toBeGreaterThan(0);
    fault(
      `20 concurrent generations under a KV budget for ${FIT} (kvCacheMib 1)`,
      `at most ${FIT} sequences hold a cache at once, peak ≤ ${BUDGET} bytes, all 20 complete`,
      `peak ${st.peakSlots} sequences, ${st.peakBytes} bytes; ${out.length} complete`,
    );
  });

  it('a request whose samples could never fit together is refused at once, naming the bytes; the engine goes on', async () => {
    const err = await model.generate({ promptIds: Array(100).fill(3), n: FIT + 1, sampling: { maxTokens: CAP - 100 } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineError);
    expect((err as EngineError).code).toBe('ENGINE_MEMORY');
    const need = (FIT + 1) * CAP * TOKEN_BYTES;
    expect((err as Error).message).toContain(`need ${need} bytes`);
    expect((err as Error).message).toContain(`the budget is ${BUDGET} bytes`);
    const [ok] = await model.generate({ promptIds: [1, 2, 3], sampling: { maxTokens: 4 } });
    expect(ok.tokenIds).toHaveLength(4);
    fault(`n = ${FIT + 1} samples where the budget holds ${FIT}`, 'ENGINE_MEMORY at once, naming bytes needed and the budget', (err as Error).message.slice(0, 90));
  });
});

describe('refused at load', () => {
  it('a budget below one sequence at the model\'s context names the bytes needed and the budget', async () => {
    // 4096 tokens × 1 KiB = 4 MiB for one sequence; the budget asked for is 1 MiB.
    const err = await loadError(await folder('ctx4096', { maxPositionEmbeddings: 4096 }), 1);
    expect(err.code).toBe('ENGINE_MEMORY');
    expect(err.message).toContain(`needs ${4096 * TOKEN_BYTES} bytes`);
    expect(err.message).toContain(`budget of ${2 ** 20} bytes`);
    fault('kvCacheMib 1 for a model whose one sequence needs 4 MiB', 'load refused: ENGINE_MEMORY, bytes needed and budget', err.message.slice(err.message.indexOf('a KV cache')).slice(0, 100));
  });

  it('a context no memory here can hold is refused with the bytes needed and available, not left to the OOM killer', async () => {
    // 16 KiB per token (4 layers, 8 KV heads of 64) at 2^24 positions: 256 GiB for one sequence.
    const err = await loadError(await folder('ctx16m', { maxPositionEmbeddings: 2 ** 24, numLayers: 4, numHeads: 8, numKvHeads: 8, headDim: 64 }));
    expect(err.code).toBe('ENGINE_MEMORY');
    expect(err.message).toMatch(/the model needs (\d+) bytes .* but (\d+) bytes .* are available/);
    const [, need, avail] = /needs (\d+) bytes .* but (\d+) bytes/.exec(err.message)!.map(Number);
    expect(need).toBeGreaterThan(2 ** 24 * 16384);
    expect(avail).toBeLessThan(need);
    fault('max_position_embeddings 2^24 (256 GiB of KV for one sequence)', 'load refused: ENGINE_MEMORY, bytes needed and available', `needs ${need}, ${avail} available`);
  });

  it('`mcprl serve --kv-cache-mib` below one sequence exits at load, naming the bytes', async () => {
    const model = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
    const r = await mcprl(['serve', '--model', model, '--port', '0', '--kv-cache-mib', '1', '--quiet']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('cannot hold one sequence');
    expect(r.stderr).toMatch(/needs \d+ bytes/);
    const line = r.stderr.trim().split('\n').find((l) => l.includes('cannot hold'))!;
    fault('`mcprl serve --kv-cache-mib 1` on the tiny model (4 MiB per sequence)', 'exits at load naming bytes needed and budget', line.slice(line.indexOf('a KV cache')).slice(0, 100));
  });
});

describe('mcprl train under a KV budget', () => {
  it('8 rollouts in flight under --kv-cache-mib 4 on the tiny model: the turns wait for room, the step trains, the cache stays within the budget', async () => {
    const scenarios = await bookshopScenarios(path.join(work, 'scenarios'), 2, 1);
    const model = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
    const r = await mcprl(['train', '--model', model, '--scenarios', scenarios, '--runs-dir', path.join(work, 'runs'), '--run', 'kv', '--quiet',
      '--groups-per-step', '2', '--rollouts-per-group', '4', '--concurrency', '8', '--max-turns', '2', '--max-tokens', '128', '--val-rollouts', '1',
      '--max-steps', '1', '--eval-every', '1', '--kv-cache-mib', '4', '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN]);
    expect(r.code, r.stderr).toBe(0);
    // 4 MiB holds one sequence of the tiny model's 2,048-token context (2 KiB a token): 2,048 tokens of slots, fewer
    // than 8 rollouts' prompts (some 200 tokens each) and 128 max tokens.
    const BUDGET = 4 * 2 ** 20;
    const rows = readFileSync(path.join(work, 'runs', 'kv', 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, number>);
    const last = rows[rows.length - 1];
    expect(last.step).toBe(1);
    expect(last.kv_cache_budget_bytes).toBe(BUDGET);
    expect(last.kv_cache_peak_bytes).toBeLessThanOrEqual(BUDGET);
    expect(last.kv_cache_peak_sequences).toBeGreaterThan(0);
    expect(last.kv_cache_peak_sequences).toBeLessThan(8);
    expect(last.infra_failures).toBe(0);
    expect(last.trained_tokens).toBeGreaterThan(0);
    fault('`mcprl train`, 8 rollouts in flight, --kv-cache-mib 4 (fewer fit)', 'the step completes; peak KV ≤ budget; rollouts wait',
      `step 1 done; peak ${last.kv_cache_peak_bytes} bytes, ${last.kv_cache_peak_sequences} sequences at once; ${last.infra_failures} infra failures`);
  });
});

describe('mcprl serve under a KV budget', () => {
  it('6 concurrent requests where 4 fit: all answered, /metrics shows the peak within the budget; n that never fits is a 400', async () => {
    // The tiny model: 2 KiB of cache per token, a 2,048-token context; 4 MiB holds 2,048 tokens of sequences, and a
    // request of a short prompt and max_tokens 400 reserves some 420.
    const engine = await ChatEngine.load(path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop'), { threads: 1, kvCacheMib: 4 });
    const server = await startServer(engine, { port: 0 });
    try {
      const post = (n: number, i: number) => fetch(`${server.url}/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: engine.modelName, messages: [{ role: 'user', content: `Find book bk-00${i}.` }], max_tokens: 400, n, seed: i }),
      });
      const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => post(1, i)));
      expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
      const tooMany = await post(5, 9);
      expect(tooMany.status).toBe(400);
      const err = (await tooMany.json()).error;
      expect(err.message).toMatch(/5 samples of \d+ tokens \(prompt and max tokens\) need \d+ bytes .* the budget is 4194304 bytes/);
      const text = await (await fetch(`${server.url.replace(/\/v1$/, '')}/metrics`)).text();
      const gauge = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
      expect(gauge('mcprl_kv_cache_budget_bytes')).toBe(4 * 2 ** 20);
      expect(gauge('mcprl_kv_cache_peak_bytes')).toBeLessThanOrEqual(4 * 2 ** 20);
      expect(gauge('mcprl_kv_cache_peak_sequences')).toBeGreaterThan(0);
      expect(gauge('mcprl_kv_cache_peak_sequences')).toBeLessThanOrEqual(4);
      fault('`mcprl serve --kv-cache-mib 4`: 6 concurrent requests where 4 fit, then n = 5 that never fits',
        'all 6 answered, peak ≤ budget; n = 5 answered 400 naming the bytes',
        `${answers.length} × 200, peak ${gauge('mcprl_kv_cache_peak_bytes')} bytes / ${gauge('mcprl_kv_cache_peak_sequences')} sequences; n = 5: ${tooMany.status}`);
    } finally {
      await server.close();
      engine.model.close();
    }
  });
});
