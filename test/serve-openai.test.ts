/**
 * `mcprl serve` answering the official `openai` SDK, on a random tiny Qwen3 model with two LoRA adapters.
 * The model is random, so the tests check structure and consistency — returned ids decode to the returned
 * text, logprobs equal the engine's own scoring of the same ids, the same seed gives the same output,
 * stream and non-stream agree — rather than content.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, makeRandomModel } from '../scripts/random-model.js';
import { adapterNameFromDir, ChatEngine } from '../src/chat/chat-engine.js';
import type { Model } from '../src/engine/model.js';
import { startServer, type RunningServer } from '../src/serve/server.js';
import { fault } from './faults/fault-table.js';

type Choice = OpenAI.Chat.Completions.ChatCompletion.Choice & { mcprl_token_ids: number[] };
type ChunkChoice = OpenAI.Chat.Completions.ChatCompletionChunk.Choice & { mcprl_token_ids?: number[] };

let dir: string;
let engine: ChatEngine;
let server: RunningServer;
let client: OpenAI;
const BASE = 'qwen3-tiny';
const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Say something about Köln.' },
];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-serve-'));
  const arch = { arch: 'qwen3' as const, seed: 3 };
  await makeRandomModel(join(dir, BASE), arch);
  await makeRandomAdapter(join(dir, 'a1'), arch, { seed: 5 });
  await makeRandomAdapter(join(dir, 'agent-v2'), arch, { seed: 6, targetModules: ['q_proj', 'v_proj'] });
  engine = await ChatEngine.load(join(dir, BASE), {
    adapters: [
      { name: 'agent', dir: join(dir, 'a1') },
      { name: adapterNameFromDir(join(dir, 'agent-v2')), dir: join(dir, 'agent-v2') },
    ],
  });
  server = await startServer(engine, { port: 0 });
  client = new OpenAI({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.close();
  (engine?.model as Model | undefined)?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const model = () => engine.model as Model;

/** Per-token logprobs of `ids` after `prompt`, from the engine's scoring path (not its sampling path). */
async function scoreCompletion(prompt: number[], ids: number[], adapter: string | null): Promise<number[]> {
  const [scores] = await model().score([[...prompt, ...ids]], { adapter });
  // score() gives one logprob per predicted position; align on the completion's tokens.
  const all = Array.from(scores);
  return all.slice(all.length - ids.length);
}

function promptIds(msgs: OpenAI.Chat.Completions.ChatCompletionMessageParam[]): number[] {
  return engine.tokenizer.encode(engine.template.render(msgs as never));
}

async function chat(body: Record<string, unknown>): Promise<OpenAI.Chat.Completions.ChatCompletion> {
  return client.chat.completions.create({ model: BASE, messages, max_tokens: 12, ...body } as never) as never;
}

describe('mcprl serve with the openai SDK', () => {
  it('lists the base model and each adapter', async () => {
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual([BASE, 'agent', 'agent-v2']);
    const agent = await client.models.retrieve('agent');
    expect(agent).toMatchObject({ id: 'agent', object: 'model', owned_by: 'mcprl', root: join(dir, 'a1'), parent: BASE });
  });

  it('answers a chat completion whose token ids, text, usage and logprobs agree', async () => {
    const r = await chat({ seed: 42, logprobs: true });
    expect(r.object).toBe('chat.completion');
    expect(r.model).toBe(BASE);
    expect(r.choices).toHaveLength(1);
    const c = r.choices[0] as Choice;
    expect(c.message.role).toBe('assistant');
    expect(typeof c.message.content).toBe('string');
    expect(['stop', 'length']).toContain(c.finish_reason);
    const ids = c.mcprl_token_ids;
    expect(ids.length).toBeGreaterThan(0);
    expect(ids.length).toBeLessThanOrEqual(12);
    if (c.finish_reason === 'length') expect(ids).toHaveLength(12);
    expect(engine.tokenizer.decode(ids, { skipSpecialTokens: true })).toBe(c.message.content);
    const prompt = promptIds(messages);
    expect(r.usage).toEqual({ prompt_tokens: prompt.length, completion_tokens: ids.length, total_tokens: prompt.length + ids.length });

    const lp = c.logprobs!.content!;
    expect(lp).toHaveLength(ids.length);
    const bytes = lp.flatMap((t, i) => (engine.tokenizer.specialTokenIds.has(ids[i]) ? [] : t.bytes!));
    expect(Buffer.from(bytes).toString('utf8')).toBe(c.message.content);
    for (const t of lp) {
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.top_logprobs).toEqual([]);
    }
    // Sampled logprobs are log π at temperature 1; the scoring path must agree within 1e-4.
    const scored = await scoreCompletion(prompt, ids, null);
    lp.forEach((t, i) => expect(Math.abs(t.logprob - scored[i])).toBeLessThanOrEqual(1e-4));
  });

  it('gives the same output for the same seed and a different one for another seed', async () => {
    const a = (await chat({ seed: 7, max_tokens: 16 })).choices[0] as Choice;
    const b = (await chat({ seed: 7, max_tokens: 16 })).choices[0] as Choice;
    const c = (await chat({ seed: 8, max_tokens: 16 })).choices[0] as Choice;
    expect(b.mcprl_token_ids).toEqual(a.mcprl_token_ids);
    expect(b.message.content).toBe(a.message.content);
    expect(c.mcprl_token_ids).not.toEqual(a.mcprl_token_ids);
  });

  it('is greedy at temperature 0', async () => {
    const a = (await chat({ temperature: 0, max_tokens: 8 })).choices[0] as Choice;
    const b = (await chat({ temperature: 0, max_tokens: 8, seed: 99 })).choices[0] as Choice;
    expect(b.mcprl_token_ids).toEqual(a.mcprl_token_ids);
  });

  it('samples n choices from one prompt', async () => {
    const r = await chat({ n: 3, seed: 11, logprobs: true });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    const prompt = promptIds(messages);
    let total = 0;
    for (const c of r.choices as Choice[]) {
      expect(engine.tokenizer.decode(c.mcprl_token_ids, { skipSpecialTokens: true })).toBe(c.message.content);
      expect(c.logprobs!.content).toHaveLength(c.mcprl_token_ids.length);
      const scored = await scoreCompletion(prompt, c.mcprl_token_ids, null);
      c.logprobs!.content!.forEach((t, i) => expect(Math.abs(t.logprob - scored[i])).toBeLessThanOrEqual(1e-4));
      total += c.mcprl_token_ids.length;
    }
    expect(r.usage!.completion_tokens).toBe(total);
    const distinct = new Set(r.choices.map((c) => JSON.stringify((c as Choice).mcprl_token_ids)));
    expect(distinct.size).toBeGreaterThan(1);
  });

  it('streams the same completion as it answers without streaming', async () => {
    const body = { seed: 5, n: 2, max_tokens: 16, logprobs: true };
    const whole = await chat(body);
    const stream = await client.chat.completions.create({
      model: BASE,
      messages,
      ...body,
      stream: true,
      stream_options: { include_usage: true },
    } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
    const got = [0, 1].map(() => ({ content: '', ids: [] as number[], lps: [] as number[], finish: null as string | null, role: '' }));
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices as ChunkChoice[]) {
        const g = got[ch.index];
        if (ch.delta.role) g.role = ch.delta.role;
        g.content += ch.delta.content ?? '';
        g.ids.push(...(ch.mcprl_token_ids ?? []));
        g.lps.push(...(ch.logprobs?.content?.map((t) => t.logprob) ?? []));
        if (ch.finish_reason) g.finish = ch.finish_reason;
      }
    }
    for (const c of whole.choices as Choice[]) {
      const g = got[c.index];
      expect(g.role).toBe('assistant');
      expect(g.content).toBe(c.message.content);
      expect(g.ids).toEqual(c.mcprl_token_ids);
      expect(g.lps).toEqual(c.logprobs!.content!.map((t) => t.logprob));
      expect(g.finish).toBe(c.finish_reason);
    }
    expect(usage).toEqual(whole.usage);
  });

  it('selects an adapter by the model field', async () => {
    const prompt = promptIds(messages);
    for (const name of ['agent', 'agent-v2']) {
      const r = await chat({ model: name, seed: 3, logprobs: true });
      expect(r.model).toBe(name);
      const c = r.choices[0] as Choice;
      const withAdapter = await scoreCompletion(prompt, c.mcprl_token_ids, name);
      const base = await scoreCompletion(prompt, c.mcprl_token_ids, null);
      c.logprobs!.content!.forEach((t, i) => expect(Math.abs(t.logprob - withAdapter[i])).toBeLessThanOrEqual(1e-4));
      // The adapter changes the distribution, so the base model scores the same tokens differently.
      expect(Math.max(...withAdapter.map((v, i) => Math.abs(v - base[i])))).toBeGreaterThan(1e-3);
    }
  });

  it('runs concurrent requests', async () => {
    const rs = await Promise.all([1, 2, 3, 4].map((seed) => chat({ seed, max_tokens: 10, model: seed % 2 ? BASE : 'agent' })));
    for (const r of rs) {
      const c = r.choices[0] as Choice;
      expect(engine.tokenizer.decode(c.mcprl_token_ids, { skipSpecialTokens: true })).toBe(c.message.content);
    }
  });
});

describe('mcprl serve errors', () => {
  async function expectApiError(p: Promise<unknown>, status: number, match: Record<string, unknown> = {}) {
    const err = await p.then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(status);
    expect((err as InstanceType<typeof OpenAI.APIError>).error).toMatchObject(match);
  }

  it('answers an unknown model with 404 model_not_found', async () => {
    await expectApiError(chat({ model: 'nope' }), 404, { code: 'model_not_found', param: 'model', type: 'invalid_request_error' });
    await expectApiError(client.models.retrieve('nope'), 404, { code: 'model_not_found' });
  });

  it('answers invalid requests with 400 naming the field', async () => {
    await expectApiError(client.chat.completions.create({ model: BASE, messages: [] }), 400, { param: 'messages' });
    await expectApiError(chat({ temperature: 5 }), 400, { param: 'temperature' });
    await expectApiError(chat({ n: 0 }), 400, { param: 'n' });
    await expectApiError(chat({ tool_choice: { type: 'function', function: { name: 'g' } }, tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] }), 400, {
      param: 'tool_choice',
    });
    await expectApiError(chat({ top_logprobs: 3 }), 400, { param: 'top_logprobs' });
    await expectApiError(chat({ logprobs: true, top_logprobs: 21 }), 400, { param: 'top_logprobs' });
    await expectApiError(chat({ max_tokens: 10_000 }), 400, { code: 'context_length_exceeded' });
    await expectApiError(
      client.chat.completions.create({ model: BASE, messages: [{ role: 'user', content: null as never }] }),
      400,
      { param: 'messages.0.content' },
    );
  });

  it('answers bad JSON, unknown routes and wrong methods with OpenAI error bodies', async () => {
    const post = (path: string, body: string) =>
      fetch(server.url.replace(/\/v1$/, '') + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const bad = await post('/v1/chat/completions', '{"model": "x", ');
    expect(bad.status).toBe(400);
    const badBody = (await bad.json()) as { error: Record<string, unknown> };
    expect(badBody.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_json', param: null });
    expect(typeof badBody.error.message).toBe('string');

    const notJsonObject = await post('/v1/chat/completions', '"hello"');
    expect(notJsonObject.status).toBe(400);

    const missing = await fetch(`${server.url}/nothing-here`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: object }).error).toBeDefined();

    const wrong = await fetch(`${server.url}/chat/completions`, { method: 'GET' });
    expect(wrong.status).toBe(405);
    fault('malformed HTTP bodies and routes to `mcprl serve`', 'OpenAI error bodies: 400 / 404 / 405', `bad JSON ${bad.status}, non-object ${notJsonObject.status}, unknown route ${missing.status}, GET ${wrong.status}`);

    // The server is still up and serving after all of the above.
    const ok = await chat({ seed: 1, max_tokens: 2 });
    expect(ok.choices).toHaveLength(1);
  });

  it('stops generating when the client goes away in the middle of a stream, and keeps serving', async () => {
    // Observe the real model's generate() call to see how the generation ended.
    const m = model();
    const original = m.generate;
    let generation: Promise<Awaited<ReturnType<Model['generate']>>> | null = null;
    m.generate = (req) => (generation = original.call(m, req));
    try {
      const controller = new AbortController();
      const stream = await client.chat.completions.create(
        { model: BASE, messages, max_tokens: 3000, stream: true, seed: 1 } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming,
        { signal: controller.signal },
      );
      let chunks = 0;
      // Abort after the third chunk and leave the loop: chunks the SDK had already buffered are not read.
      await (async () => {
        for await (const _chunk of stream) {
          if (++chunks === 3) {
            controller.abort();
            break;
          }
        }
      })().catch((e: unknown) => expect((e as Error).name).toMatch(/Abort/));
      expect(chunks).toBe(3);
      const [seq] = await generation!;
      expect(seq.finishReason).toBe('abort');
      expect(seq.tokenIds.length).toBeLessThan(3000);
    } finally {
      m.generate = original;
    }
    const ok = await chat({ seed: 2, max_tokens: 2 });
    expect(ok.choices).toHaveLength(1);
  });

  it('stops generating when the client of a plain (non-stream) request goes away', async () => {
    const m = model();
    const original = m.generate;
    const controller = new AbortController();
    let generation: Promise<Awaited<ReturnType<Model['generate']>>> | null = null;
    // The client gives up once the engine has sampled 5 tokens (observed on the real model, no timing).
    m.generate = (req) => {
      let count = 0;
      const onToken = req.onToken;
      return (generation = original.call(m, {
        ...req,
        onToken: (s, t, lp, slp, top) => {
          onToken?.(s, t, lp, slp, top);
          if (++count === 5) controller.abort();
        },
      }));
    };
    try {
      const err = await client.chat.completions
        .create({ model: BASE, messages, max_tokens: 3000, seed: 4 }, { signal: controller.signal })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.APIUserAbortError);
      const [seq] = await generation!;
      expect(seq.finishReason).toBe('abort');
      expect(seq.tokenIds.length).toBeLessThan(3000);
    } finally {
      m.generate = original;
    }
  });

  it('refuses a body over the size limit with 413', async () => {
    const small = await startServer(engine, { port: 0, maxBodyBytes: 1000 });
    try {
      const res = await fetch(`${small.url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: BASE, messages: [{ role: 'user', content: 'x'.repeat(2000) }] }),
      });
      expect(res.status).toBe(413);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('request_too_large');
    } finally {
      await small.close();
    }
  });
});
