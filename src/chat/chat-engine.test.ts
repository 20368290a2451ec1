/**
 * ChatEngine on a random tiny Qwen3 model: stop strings on whatever the model writes, stream/complete
 * agreement, and request validation. The HTTP layer is tested in test/serve-*.test.ts.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomModel } from '../../scripts/random-model.js';
import { ChatEngine, ChatRequestError, type ChatResult, type ChatStreamEvent } from './chat-engine.js';
import type { Model } from '../engine/model.js';

let dir: string;
let engine: ChatEngine;
const messages = [{ role: 'user', content: 'Write anything.' }];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-chat-'));
  await makeRandomModel(join(dir, 'm'), { arch: 'qwen3', seed: 9 });
  engine = await ChatEngine.load(join(dir, 'm'), { chatTemplateKwargs: { enable_thinking: false } });
});

afterAll(async () => {
  (engine?.model as Model | undefined)?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function collect(gen: AsyncGenerator<ChatStreamEvent, ChatResult>) {
  const events: ChatStreamEvent[] = [];
  for (;;) {
    const step = await gen.next();
    if (step.done) return { events, result: step.value };
    events.push(step.value);
  }
}

describe('ChatEngine', () => {
  it('applies default template kwargs (enable_thinking=false here) to the prompt', () => {
    const ids = engine.promptIds(engine.parseRequest({ model: 'm', messages }));
    expect(engine.tokenizer.decode(ids).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
    const thinking = engine.promptIds(engine.parseRequest({ model: 'm', messages, chat_template_kwargs: { enable_thinking: true } }));
    expect(engine.tokenizer.decode(thinking).endsWith('<|im_start|>assistant\n')).toBe(true);
  });

  it('cuts the text at the first stop string and keeps ids up to the token that completed it', async () => {
    const free = (await engine.complete({ model: 'm', messages, seed: 21, max_tokens: 40 })).choices[0];
    const text = free.text;
    expect(text.length).toBeGreaterThan(10);
    // A stop string taken from the middle of what the model writes with this seed.
    const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
    const at = text.indexOf(stop);
    const cut = (await engine.complete({ model: 'm', messages, seed: 21, max_tokens: 40, stop })).choices[0];
    expect(cut.finishReason).toBe('stop');
    expect(cut.text).toBe(text.slice(0, at));
    expect(cut.content).toBe(text.slice(0, at));
    // The ids are a prefix of the free run's, and the last one is the token that completed the stop string.
    expect(free.tokenIds.slice(0, cut.tokenIds.length)).toEqual(cut.tokenIds);
    const decoded = engine.tokenizer.decode(cut.tokenIds, { skipSpecialTokens: true });
    expect(decoded.startsWith(text.slice(0, at) + stop)).toBe(true);
    expect(engine.tokenizer.decode(cut.tokenIds.slice(0, -1), { skipSpecialTokens: true }).includes(stop)).toBe(false);
    expect(cut.logprobs).toEqual(free.logprobs.slice(0, cut.tokenIds.length));

    const streamed = await collect(engine.stream({ model: 'm', messages, seed: 21, max_tokens: 40, stop }));
    const deltas = streamed.events.filter((e) => e.type === 'delta');
    expect(deltas.map((e) => e.content).join('')).toBe(cut.content);
    expect(deltas.flatMap((e) => e.tokenIds)).toEqual(cut.tokenIds);
    expect(streamed.result.choices[0].tokenIds).toEqual(cut.tokenIds);
  });

  it('never streams text it later takes back', async () => {
    const { events, result } = await collect(engine.stream({ model: 'm', messages, seed: 4, n: 2, max_tokens: 30 }));
    for (const c of result.choices) {
      const mine = events.filter((e) => e.index === c.index);
      expect(mine.at(-1)).toMatchObject({ type: 'finish' });
      const deltas = mine.filter((e) => e.type === 'delta');
      expect(deltas.map((e) => e.content).join('')).toBe(c.content);
      expect(deltas.flatMap((e) => e.logprobs)).toEqual(c.logprobs);
      for (const d of deltas) expect(d.content).not.toContain('\uFFFD');
    }
  });

  it('stops generating when the consumer leaves the stream early', async () => {
    const gen = engine.stream({ model: 'm', messages, seed: 1, max_tokens: 3000 });
    const first = await gen.next();
    expect(first.done).toBe(false);
    await gen.return(undefined as never);
    // The engine is free again: a new request completes.
    const r = await engine.complete({ model: 'm', messages, seed: 1, max_tokens: 3 });
    expect(r.choices[0].tokenIds.length).toBeLessThanOrEqual(3);
  });

  it('rejects invalid requests with ChatRequestError and the right status', async () => {
    const bad = async (body: unknown) => engine.complete(body).catch((e: unknown) => e as ChatRequestError);
    expect(await bad(null)).toMatchObject({ status: 400 });
    expect(await bad({ model: 'm', messages: [{ role: 'robot', content: 'x' }] })).toMatchObject({ status: 400, param: 'messages.0.role' });
    expect(await bad({ model: 'other', messages })).toMatchObject({ status: 404, code: 'model_not_found' });
    expect(await bad({ model: 'm', messages, tool_choice: { type: 'function', function: { name: 'f' } } })).toMatchObject({ status: 400 });
    expect(await bad({ model: 'm', messages: [{ role: 'user', content: ' x'.repeat(5000) }] })).toMatchObject({
      status: 400,
      code: 'context_length_exceeded',
    });
    expect(await bad({ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] })).toMatchObject({ status: 400 });
  });
});
