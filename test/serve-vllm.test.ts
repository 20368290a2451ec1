/**
 * `mcprl serve` in vLLM's dialect, through the official `openai` SDK and plain fetch, on the bundled tiny model
 * (fixtures/models/tiny-bookshop) and the real engine:
 *  - `top_logprobs: 5` against an independent forward: the model exported to ONNX (src/export/onnx.ts) and run
 *    by onnxruntime-node, its full log-softmax at temperature 1 computed here in float64. Tolerance 1e-4 (the
 *    same f32 rounding gap as test/export-onnx.test.ts's).
 *  - `return_tokens_as_token_ids` and `return_token_ids` (prompt and completion ids, streamed too);
 *  - `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` with adapters written by the test helpers
 *    (scripts/random-model.ts), their error shapes, and a replacement while a request is running;
 *  - `/metrics` parsed as Prometheus text.
 * Nothing here waits on time: ordering comes from awaited results and from hooks on the real model.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { makeRandomAdapter, type RandomModelOptions } from '../scripts/random-model.js';
import { ChatEngine } from '../src/chat/chat-engine.js';
import type { Model } from '../src/engine/model.js';
import { exportOnnx } from '../src/export/onnx.js';
import { ServeMetrics } from '../src/serve/metrics.js';
import { startServer, type RunningServer } from '../src/serve/server.js';
import { REPO_ROOT } from './helpers/servers.js';

const TINY = join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
/** The tiny model's dimensions (its config.json), for adapters that fit it. */
const TINY_SHAPE: RandomModelOptions = { arch: 'qwen3', hiddenSize: 128, numLayers: 4, numHeads: 4, numKvHeads: 2, headDim: 32, intermediateSize: 384, vocabSize: 1024 };
const TOL = 1e-4;

type Entry = { token: string; logprob: number; bytes: number[] | null; top_logprobs: { token: string; logprob: number }[] };
type Choice = OpenAI.Chat.Completions.ChatCompletion.Choice & { mcprl_token_ids: number[]; token_ids?: number[] };
type Completion = Omit<OpenAI.Chat.Completions.ChatCompletion, 'choices'> & { prompt_token_ids?: number[]; mcprl_adapter: string | null; choices: Choice[] };

let dir: string;
let engine: ChatEngine;
let server: RunningServer;
let client: OpenAI;
let base: string;
let session: ort.InferenceSession;

const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Is bk-007 in stock?' }];
const model = () => engine.model as Model;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-serve-vllm-'));
  await makeRandomAdapter(join(dir, 'startup'), TINY_SHAPE, { seed: 1 });
  await makeRandomAdapter(join(dir, 'a1'), TINY_SHAPE, { seed: 2, rank: 8, alpha: 16 });
  await makeRandomAdapter(join(dir, 'a2'), TINY_SHAPE, { seed: 3, targetModules: ['q_proj', 'v_proj', 'down_proj'] });
  // Made for another model: 64 wide where the tiny model is 128.
  await makeRandomAdapter(join(dir, 'wrong-shape'), { ...TINY_SHAPE, hiddenSize: 64 }, { seed: 4 });
  await mkdir(join(dir, 'not-lora'));
  await writeFile(join(dir, 'not-lora', 'adapter_config.json'), JSON.stringify({ peft_type: 'PREFIX_TUNING', r: 8, lora_alpha: 8 }));
  engine = await ChatEngine.load(TINY, { adapters: [{ name: 'startup', dir: join(dir, 'startup') }], threads: 2 });
  base = engine.modelName;
  server = await startServer(engine, { port: 0, loraUpdating: true });
  client = new OpenAI({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
  const onnx = await exportOnnx({ modelDir: TINY, out: join(dir, 'onnx') });
  session = await ort.InferenceSession.create(onnx.file);
}, 120_000);

afterAll(async () => {
  await session?.release();
  await server?.close();
  (engine?.model as Model | undefined)?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function chat(body: Record<string, unknown>): Promise<Completion> {
  return (await client.chat.completions.create({ model: base, messages, max_tokens: 12, ...body } as never)) as unknown as Completion;
}

/** log softmax (float64) of the ONNX model's logits at every position of `ids`: row t predicts ids[t + 1]. */
async function onnxLogSoftmax(ids: number[]): Promise<Float64Array[]> {
  const out = await session.run({ input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]) });
  const logits = out.logits.data as Float32Array;
  const V = out.logits.dims[2];
  return ids.map((_, t) => {
    const row = logits.subarray(t * V, (t + 1) * V);
    let max = -Infinity;
    for (const x of row) max = Math.max(max, x);
    let sum = 0;
    for (const x of row) sum += Math.exp(x - max);
    const lse = max + Math.log(sum);
    return Float64Array.from(row, (x) => x - lse);
  });
}

const idOf = (token: string) => {
  const m = /^token_id:(\d+)$/.exec(token);
  if (!m) throw new Error(`not a token_id:N token: ${token}`);
  return Number(m[1]);
};

async function post(path: string, body: unknown): Promise<{ status: number; text: string; json: () => unknown }> {
  const res = await fetch(server.url.replace(/\/v1$/, '') + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) };
}

async function modelIds(): Promise<string[]> {
  const ids: string[] = [];
  for await (const m of client.models.list()) ids.push(m.id);
  return ids;
}

describe('top_logprobs', () => {
  it('returns five alternatives matching an independent full softmax (ONNX Runtime) within 1e-4', async () => {
    // Sampled at temperature 0.7: the logprobs are still the model's own at temperature 1, as vLLM's are.
    const r = await chat({ seed: 3, n: 6, temperature: 0.7, max_tokens: 16, logprobs: true, top_logprobs: 5, return_tokens_as_token_ids: true, return_token_ids: true });
    const P = r.prompt_token_ids!.length;
    let worst = 0;
    let tokens = 0;
    for (const c of r.choices) {
      const ids = c.mcprl_token_ids;
      const entries = c.logprobs!.content as unknown as Entry[];
      expect(entries).toHaveLength(ids.length);
      tokens += ids.length;
      const ref = await onnxLogSoftmax([...r.prompt_token_ids!, ...ids]);
      entries.forEach((e, t) => {
        const row = ref[P + t - 1];
        expect(idOf(e.token)).toBe(ids[t]);
        worst = Math.max(worst, Math.abs(e.logprob - row[ids[t]]));
        expect(e.top_logprobs).toHaveLength(5);
        const ranked = Array.from(row.keys()).sort((a, b) => row[b] - row[a]);
        e.top_logprobs.forEach((alt, k) => {
          const id = idOf(alt.token);
          worst = Math.max(worst, Math.abs(alt.logprob - row[id]));
          // The k-th alternative is the reference's k-th most likely token (up to ties within the tolerance).
          if (id !== ranked[k]) expect(Math.abs(row[id] - row[ranked[k]])).toBeLessThanOrEqual(TOL);
        });
      });
    }
    expect(tokens).toBeGreaterThan(10);
    expect(worst).toBeLessThanOrEqual(TOL);
    console.log(`top_logprobs vs ONNX Runtime full softmax: max |Δ| = ${worst.toExponential(2)} over ${tokens} tokens × 6 logprobs`);
  });

  it('streams the same alternatives as the whole answer, with the text tokens by default', async () => {
    const body = { seed: 5, max_tokens: 10, logprobs: true, top_logprobs: 3 };
    const whole = (await chat(body)).choices[0];
    const stream = await client.chat.completions.create({ model: base, messages, ...body, stream: true } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
    const streamed: Entry[] = [];
    for await (const chunk of stream) for (const ch of chunk.choices) streamed.push(...((ch.logprobs?.content ?? []) as unknown as Entry[]));
    expect(streamed).toEqual(whole.logprobs!.content);
    const first = streamed[0];
    expect(first.token).toBe(engine.tokenizer.decode([whole.mcprl_token_ids[0]]));
    expect(first.top_logprobs).toHaveLength(3);
  });

  it('refuses more than 20, and top_logprobs without logprobs', async () => {
    await expect(chat({ logprobs: true, top_logprobs: 21 })).rejects.toMatchObject({ status: 400, error: { param: 'top_logprobs' } });
    await expect(chat({ top_logprobs: 2 })).rejects.toMatchObject({ status: 400, error: { param: 'top_logprobs' } });
  });
});

describe('token ids', () => {
  it('returns the prompt ids and the sampled ids, and token_id:N names that rebuild the sequence', async () => {
    const r = await chat({ seed: 9, logprobs: true, return_token_ids: true, return_tokens_as_token_ids: true });
    expect(r.prompt_token_ids).toEqual(engine.promptIds({ messages: messages as never }));
    expect(r.usage!.prompt_tokens).toBe(r.prompt_token_ids!.length);
    const c = r.choices[0];
    expect(c.token_ids).toEqual(c.mcprl_token_ids);
    const rebuilt = (c.logprobs!.content as unknown as Entry[]).map((e) => idOf(e.token));
    expect(rebuilt).toEqual(c.token_ids);
    expect(engine.tokenizer.decode(rebuilt, { skipSpecialTokens: true })).toBe(c.message.content);
    // Without the flags, neither field is there.
    const plain = await chat({ seed: 9 });
    expect(plain.prompt_token_ids).toBeUndefined();
    expect(plain.choices[0].token_ids).toBeUndefined();
    expect(plain.choices[0].mcprl_token_ids).toEqual(c.token_ids);
  });

  it('streams prompt_token_ids in the first chunk and token_ids as deltas', async () => {
    const body = { seed: 9, n: 2, max_tokens: 10, return_token_ids: true };
    const whole = await chat(body);
    const stream = await client.chat.completions.create({ model: base, messages, ...body, stream: true } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
    const chunks: (OpenAI.Chat.Completions.ChatCompletionChunk & { prompt_token_ids?: number[] })[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0].prompt_token_ids).toEqual(whole.prompt_token_ids);
    expect(chunks.slice(1).every((ch) => ch.prompt_token_ids === undefined)).toBe(true);
    const ids: number[][] = [[], []];
    for (const ch of chunks) for (const c of ch.choices as (typeof ch.choices[number] & { token_ids?: number[] })[]) ids[c.index].push(...(c.token_ids ?? []));
    expect(ids).toEqual(whole.choices.map((c) => c.token_ids));
  });

  it('streams prompt_token_ids without tokenising the prompt a second time', async () => {
    // Counts the engine's prompt tokenisations (a structural hook: no timing involved). promptIds, not the
    // tokenizer's encode: promptIds remembers a prompt's ids, so a second call would not reach encode.
    const encode = vi.spyOn(engine, 'promptIds');
    // Each request asks about a prompt of its own: the engine remembers a prompt's ids, so a repeated one is not
    // tokenised at all.
    const encodes = async (asked: typeof messages, extra: Record<string, unknown>) => {
      encode.mockClear();
      const stream = await client.chat.completions.create({ model: base, messages: asked, seed: 9, max_tokens: 4, ...extra, stream: true } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
      const chunks: (OpenAI.Chat.Completions.ChatCompletionChunk & { prompt_token_ids?: number[] })[] = [];
      for await (const chunk of stream) chunks.push(chunk);
      return { calls: encode.mock.calls.length, prompt: chunks[0].prompt_token_ids };
    };
    const other = (tag: string) => messages.map((m, i) => (i === messages.length - 1 ? { ...m, content: `${String(m.content)} (${tag})` } : m)) as typeof messages;
    try {
      const plain = await encodes(other('plain'), {});
      const withIds = await encodes(other('ids'), { return_token_ids: true });
      expect(plain.prompt).toBeUndefined();
      expect(withIds.prompt).toEqual(engine.promptIds({ messages: other('ids') as never }));
      expect(plain.calls).toBeGreaterThan(0);
      expect(withIds.calls).toBe(plain.calls);
    } finally {
      encode.mockRestore();
    }
  });
});

describe('/v1/load_lora_adapter and /v1/unload_lora_adapter', () => {
  /** Per-token logprobs of a choice under `adapter` by the scoring path. */
  async function scored(prompt: number[], ids: number[], adapter: string | null): Promise<number[]> {
    const [s] = await model().score([[...prompt, ...ids]], { adapter });
    return Array.from(s).slice(prompt.length);
  }

  it('loads a PEFT folder under a new name, serves it, and unloads it', async () => {
    const load = await post('/v1/load_lora_adapter', { lora_name: 'policy-step-1', lora_path: join(dir, 'a1') });
    expect(load).toMatchObject({ status: 200, text: "Success: LoRA adapter 'policy-step-1' added successfully." });
    expect(await modelIds()).toEqual([base, 'startup', 'policy-step-1']);
    expect(await client.models.retrieve('policy-step-1')).toMatchObject({ root: join(dir, 'a1'), parent: base });

    const r = await chat({ model: 'policy-step-1', seed: 4, logprobs: true, return_token_ids: true });
    expect(r.model).toBe('policy-step-1');
    const adapter = r.mcprl_adapter!;
    expect(adapter).toBe(engine.routes.target('policy-step-1'));
    const c = r.choices[0];
    const withAdapter = await scored(r.prompt_token_ids!, c.mcprl_token_ids, adapter);
    c.logprobs!.content!.forEach((t, i) => expect(Math.abs(t.logprob - withAdapter[i])).toBeLessThanOrEqual(TOL));
    const without = await scored(r.prompt_token_ids!, c.mcprl_token_ids, null);
    expect(Math.max(...without.map((v, i) => Math.abs(v - withAdapter[i])))).toBeGreaterThan(1e-3);

    const unload = await post('/v1/unload_lora_adapter', { lora_name: 'policy-step-1' });
    expect(unload).toMatchObject({ status: 200, text: "Success: LoRA adapter 'policy-step-1' removed successfully." });
    expect(await modelIds()).toEqual([base, 'startup']);
    expect(model().adapterNames()).not.toContain(adapter);
    await expect(chat({ model: 'policy-step-1' })).rejects.toMatchObject({ status: 404, error: { code: 'model_not_found' } });
  });

  it('unloads an adapter given at startup', async () => {
    expect((await post('/v1/unload_lora_adapter', { lora_name: 'startup' })).status).toBe(200);
    expect(await modelIds()).toEqual([base]);
    expect(model().adapterNames()).toEqual([]);
    expect((await post('/v1/load_lora_adapter', { lora_name: 'startup', lora_path: join(dir, 'startup') })).status).toBe(200);
  });

  it("answers unknown names, bad paths, duplicates and missing fields in vLLM's error shape", async () => {
    const cases: [string, unknown, number, string, RegExp][] = [
      ['/v1/unload_lora_adapter', { lora_name: 'nope' }, 404, 'NotFoundError', /^The lora adapter 'nope' cannot be found\.$/],
      ['/v1/load_lora_adapter', { lora_name: 'x', lora_path: join(dir, 'missing') }, 404, 'NotFoundError', /^Loading lora x failed: No adapter found for .*missing$/],
      ['/v1/load_lora_adapter', { lora_name: 'startup', lora_path: join(dir, 'a2') }, 400, 'InvalidUserInput', /'startup' has already been loaded/],
      ['/v1/load_lora_adapter', { lora_name: base, lora_path: join(dir, 'a2') }, 400, 'InvalidUserInput', /base model/],
      ['/v1/load_lora_adapter', { lora_name: 'x', lora_path: join(dir, 'not-lora') }, 400, 'BadRequestError', /adapter_config\.json: peft_type/],
      ['/v1/load_lora_adapter', { lora_name: 'x', lora_path: join(dir, 'wrong-shape') }, 400, 'BadRequestError', /shape/],
      ['/v1/load_lora_adapter', { lora_name: 'x' }, 400, 'InvalidUserInput', /Both 'lora_name' and 'lora_path' must be provided/],
      ['/v1/load_lora_adapter', { lora_name: 3, lora_path: 'p' }, 400, 'BadRequestError', /lora_name/],
      ['/v1/unload_lora_adapter', {}, 400, 'InvalidUserInput', /'lora_name' needs to be provided/],
    ];
    for (const [path, body, status, type, message] of cases) {
      const r = await post(path, body);
      expect(r.status, `${path} ${JSON.stringify(body)}`).toBe(status);
      const err = (r.json() as { error: { message: string; type: string; param: string | null; code: number } }).error;
      expect(err, `${path} ${JSON.stringify(body)}`).toMatchObject({ type, code: status });
      expect(err.message).toMatch(message);
    }
    // Nothing was left half loaded, and the server still serves.
    expect(await modelIds()).toEqual([base, 'startup']);
    expect(model().adapterNames()).toEqual(['startup']);
    expect((await chat({ model: 'startup', max_tokens: 2 })).choices).toHaveLength(1);
  });

  it('replaces an adapter in place: a request already running finishes on the one it started with', async () => {
    const request = { model: 'startup', seed: 12, max_tokens: 10, logprobs: true };
    const before = await chat(request);
    const old = before.mcprl_adapter!;
    // The request below has resolved its adapter (the chat core counts it as running) when generate() is
    // called; the replacement runs to its end right then, before a single token is sampled.
    const m = model();
    const original = m.generate;
    let during: { loaded: string[]; target: string | undefined } | null = null;
    m.generate = async (req) => {
      m.generate = original;
      const replaced = await post('/v1/load_lora_adapter', { lora_name: 'startup', lora_path: join(dir, 'a2'), load_inplace: true });
      expect(replaced.status).toBe(200);
      during = { loaded: m.adapterNames(), target: engine.routes.target('startup') };
      return original.call(m, req);
    };
    let running: Completion;
    try {
      running = await chat(request);
    } finally {
      m.generate = original;
    }
    expect(during!.target).not.toBe(old);
    expect(during!.loaded).toEqual(expect.arrayContaining([old, during!.target]));
    // Bit for bit what the old adapter gave before the replacement.
    expect(running.mcprl_adapter).toBe(old);
    expect(running.choices[0].mcprl_token_ids).toEqual(before.choices[0].mcprl_token_ids);
    expect(running.choices[0].logprobs).toEqual(before.choices[0].logprobs);
    // Once that request is done the old adapter is gone; new requests get the new one.
    expect(m.adapterNames()).toEqual([during!.target]);
    const after = await chat(request);
    expect(after.mcprl_adapter).toBe(during!.target);
    expect(after.choices[0].logprobs).not.toEqual(before.choices[0].logprobs);
  });

  it('is off unless asked for: a plain server answers 404', async () => {
    const plain = await startServer(engine, { port: 0 });
    try {
      const res = await fetch(`${plain.url}/load_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'y', lora_path: join(dir, 'a1') }) });
      expect(res.status).toBe(404);
      expect(model().adapterNames()).not.toContain('y');
    } finally {
      await plain.close();
    }
  });
});

/** Prometheus text → name{labels} → value. */
function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${line}`);
    out.set(m[1] + (m[2] ?? ''), Number(m[3]));
  }
  return out;
}

describe('/metrics', () => {
  it('counts requests and tokens, and reports queues and adapters, in Prometheus text', async () => {
    const own = await startServer(engine, { port: 0 });
    try {
      const c = new OpenAI({ baseURL: own.url, apiKey: 'unused', maxRetries: 0 });
      const scrape = async () => parseMetrics(await (await fetch(own.url.replace(/\/v1$/, '') + '/metrics')).text());
      // The prefix cache's counters are the engine's, since it loaded (earlier tests used it too): compared by difference.
      const before = await scrape();
      const answers = [];
      for (const seed of [1, 2]) answers.push(await c.chat.completions.create({ model: base, messages, max_tokens: 6, seed, n: 2 }));
      await c.chat.completions.create({ model: 'nope', messages }).catch(() => undefined);
      // GET /health answers {"status": "ok"} (vLLM's liveness probe), and is counted like any route.
      const health = await fetch(own.url.replace(/\/v1$/, '') + '/health');
      expect(health.status).toBe(200);
      expect(await health.json()).toEqual({ status: 'ok' });
      const res = await fetch(own.url.replace(/\/v1$/, '') + '/metrics');
      expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      const text = await res.text();
      const m = parseMetrics(text);
      expect(m.get('mcprl_http_requests_total{route="/v1/chat/completions",status="200"}')).toBe(2);
      expect(m.get('mcprl_http_requests_total{route="/v1/chat/completions",status="404"}')).toBe(1);
      expect(m.get('mcprl_http_requests_total{route="/health",status="200"}')).toBe(1);
      expect(m.get('mcprl_prompt_tokens_total')).toBe(answers.reduce((s, a) => s + a.usage!.prompt_tokens, 0));
      expect(m.get('mcprl_generation_tokens_total')).toBe(answers.reduce((s, a) => s + a.usage!.completion_tokens, 0));
      const finished = [...m].filter(([k]) => k.startsWith('mcprl_request_success_total')).reduce((s, [, v]) => s + v, 0);
      expect(finished).toBe(4);
      expect(m.get('mcprl_num_requests_waiting')).toBe(0);
      expect(m.get('mcprl_num_requests_running')).toBe(0);
      expect(m.get('mcprl_lora_adapters')).toBe(1);
      const info = [...m.keys()].filter((k) => k.startsWith('mcprl_lora_adapter_info'));
      expect(info).toHaveLength(1);
      expect(info[0]).toContain('name="startup"');
      expect(info[0]).toContain(`base_model="${base}"`);
      expect(text).toContain('# TYPE mcprl_prompt_tokens_total counter');
      expect(text).toContain('# TYPE mcprl_num_requests_running gauge');
      // The second request's prompt is the first's: every token of it came from the prefix cache.
      const d = (k: string) => m.get(k)! - before.get(k)!;
      expect(d('mcprl_prefix_cache_queries_total')).toBe(m.get('mcprl_prompt_tokens_total'));
      expect(d('mcprl_prefix_cache_hits_total')).toBeGreaterThanOrEqual(answers[1].usage!.prompt_tokens);
      expect(d('mcprl_prefill_tokens_total')).toBe(d('mcprl_prefix_cache_queries_total') - d('mcprl_prefix_cache_hits_total'));
      expect(m.get('mcprl_prefix_cache_bytes')).toBeGreaterThan(0);
      expect(text).toContain('# TYPE mcprl_prefix_cache_hits_total counter');
    } finally {
      await own.close();
    }
  });

  it('counts a request held while its adapter is replaced as waiting, and a generating one as running', async () => {
    const release = engine.routes.hold('startup');
    const held = engine.complete({ model: 'startup', messages: messages as never, sampling: { maxTokens: 2, seed: 1 } });
    const m = parseMetrics(await (await fetch(server.url.replace(/\/v1$/, '') + '/metrics')).text());
    expect(m.get('mcprl_num_requests_waiting')).toBe(1);
    release();
    await held;
    // Read synchronously from inside generation: one request running.
    const metrics = new ServeMetrics();
    let seen: Map<string, number> | null = null;
    const mdl = model();
    const original = mdl.generate;
    mdl.generate = (req) =>
      original.call(mdl, {
        ...req,
        onToken: (...args) => {
          req.onToken?.(...args);
          seen ??= parseMetrics(metrics.render([engine]));
        },
      });
    try {
      await engine.complete({ messages: messages as never, sampling: { maxTokens: 2, seed: 1 } });
    } finally {
      mdl.generate = original;
    }
    expect(seen!.get('mcprl_num_requests_running')).toBe(1);
    expect(seen!.get('mcprl_num_requests_waiting')).toBe(0);
  });
});
