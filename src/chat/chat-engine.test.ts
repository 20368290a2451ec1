/**
 * ChatEngine on a random tiny Qwen3 model: stop strings on whatever the model writes, stream/complete
 * agreement, and the requests it refuses. OpenAI's request mapping is tested in src/serve/openai-chat.test.ts,
 * the HTTP layer in test/serve-*.test.ts.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { makeRandomAdapter, makeRandomModel } from '../../scripts/random-model.js';
import { ChatEngine, ChatError, type ChatResult, type ChatStreamEvent, type ChatTurnRequest } from './chat-engine.js';
import type { Model } from '../engine/model.js';
import type { ChatMessage } from './message.js';

let dir: string;
let engine: ChatEngine;
const messages: ChatMessage[] = [{ role: 'user', content: 'Write anything.' }];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-chat-'));
  await makeRandomModel(join(dir, 'm'), { arch: 'qwen3', seed: 9 });
  await makeRandomAdapter(join(dir, 'a'), { arch: 'qwen3' }, { seed: 1 });
  await makeRandomAdapter(join(dir, 'b'), { arch: 'qwen3' }, { seed: 2 });
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
    const ids = engine.promptIds({ messages });
    expect(engine.tokenizer.decode(ids).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
    const thinking = engine.promptIds({ messages, chatTemplateKwargs: { enable_thinking: true } });
    expect(engine.tokenizer.decode(thinking).endsWith('<|im_start|>assistant\n')).toBe(true);
  });

  it('remembers prompt ids: each distinct input is rendered once, and a caller may change what it gets', () => {
    const tools = [{ type: 'function' as const, function: { name: 'get_book', description: 'A book.', parameters: { type: 'object', properties: { id: { type: 'string' } } } } }];
    const fresh = new ChatEngine(engine.model, engine.tokenizer, { chatTemplateKwargs: { enable_thinking: false } });
    const render = vi.spyOn(fresh.template, 'render');
    const turn: ChatMessage[] = [...messages, { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_book', arguments: '{"id": "bk-1"}' } }] }, { role: 'tool', tool_call_id: 'c1', content: 'A novel.' }];
    const first = fresh.promptIds({ messages: turn, tools });
    first.push(-1);
    // Equal input in other objects: not rendered again.
    expect(fresh.promptIds(JSON.parse(JSON.stringify({ messages: turn, tools })))).toEqual(first.slice(0, -1));
    expect(render).toHaveBeenCalledTimes(1);
    expect(fresh.promptIds({ messages: turn, tools, chatTemplateKwargs: { enable_thinking: true } })).not.toEqual(first.slice(0, -1));
    expect(fresh.promptIds({ messages: turn })).not.toEqual(first.slice(0, -1));
    expect(render).toHaveBeenCalledTimes(3);
    // The same ids as an engine that never saw these prompts.
    expect(fresh.promptIds({ messages: turn, tools })).toEqual(engine.promptIds({ messages: turn, tools }));
    expect(render).toHaveBeenCalledTimes(3);
  });

  it('renders every time with a template that reads the clock (strftime_now)', () => {
    const tokenizer = Object.create(engine.tokenizer, { chatTemplate: { value: "{{ strftime_now('%Y') }}{% for m in messages %}{{ m.content }}{% endfor %}" } });
    const dated = new ChatEngine(engine.model, tokenizer);
    expect(dated.template.pure).toBe(false);
    expect(engine.template.pure).toBe(true);
    const render = vi.spyOn(dated.template, 'render');
    expect(dated.promptIds({ messages })).toEqual(dated.promptIds({ messages }));
    expect(render).toHaveBeenCalledTimes(2);
  });

  it('cuts the text at the first stop string and keeps ids up to the token that completed it', async () => {
    const free = (await engine.complete({ messages, sampling: { seed: 21, maxTokens: 40 } })).choices[0];
    const text = free.text;
    expect(text.length).toBeGreaterThan(10);
    // A stop string taken from the middle of what the model writes with this seed.
    const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
    const at = text.indexOf(stop);
    const cut = (await engine.complete({ messages, sampling: { seed: 21, maxTokens: 40, stop: [stop] } })).choices[0];
    expect(cut.finishReason).toBe('stop');
    expect(cut.text).toBe(text.slice(0, at));
    expect(cut.content).toBe(text.slice(0, at));
    // The ids are a prefix of the free run's, and the last one is the token that completed the stop string.
    expect(free.tokenIds.slice(0, cut.tokenIds.length)).toEqual(cut.tokenIds);
    const decoded = engine.tokenizer.decode(cut.tokenIds, { skipSpecialTokens: true });
    expect(decoded.startsWith(text.slice(0, at) + stop)).toBe(true);
    expect(engine.tokenizer.decode(cut.tokenIds.slice(0, -1), { skipSpecialTokens: true }).includes(stop)).toBe(false);
    expect(cut.logprobs).toEqual(free.logprobs.slice(0, cut.tokenIds.length));

    const streamed = await collect(engine.stream({ messages, sampling: { seed: 21, maxTokens: 40, stop: [stop] } }));
    const deltas = streamed.events.filter((e) => e.type === 'delta');
    expect(deltas.map((e) => e.content).join('')).toBe(cut.content);
    expect(deltas.flatMap((e) => e.tokenIds)).toEqual(cut.tokenIds);
    expect(streamed.result.choices[0].tokenIds).toEqual(cut.tokenIds);
  });

  it('never streams text it later takes back', async () => {
    const { events, result } = await collect(engine.stream({ model: 'm', messages, sampling: { seed: 4, n: 2, maxTokens: 30 } }));
    for (const c of result.choices) {
      const mine = events.filter((e) => e.type !== 'start' && e.index === c.index);
      expect(mine.at(-1)).toMatchObject({ type: 'finish' });
      const deltas = mine.filter((e) => e.type === 'delta');
      expect(deltas.map((e) => e.content).join('')).toBe(c.content);
      expect(deltas.flatMap((e) => e.logprobs)).toEqual(c.logprobs);
      for (const d of deltas) expect(d.content).not.toContain('\uFFFD');
    }
  });

  it('stops generating when the consumer leaves the stream early', async () => {
    const gen = engine.stream({ messages, sampling: { seed: 1, maxTokens: 3000 } });
    const first = await gen.next();
    expect(first.done).toBe(false);
    await gen.return(undefined as never);
    // The engine is free again: a new request completes.
    const r = await engine.complete({ messages, sampling: { seed: 1, maxTokens: 3 } });
    expect(r.choices[0].tokenIds.length).toBeLessThanOrEqual(3);
  });

  it('refuses what it cannot serve with a ChatError naming the code, status and field', async () => {
    const bad = async (req: ChatTurnRequest) => engine.complete(req).catch((e: unknown) => e);
    const unknown = await bad({ model: 'other', messages });
    expect(unknown).toBeInstanceOf(ChatError);
    expect(unknown).toMatchObject({ code: 'MODEL_NOT_FOUND', status: 404, param: 'model' });
    expect(await bad({ messages: [{ role: 'user', content: ' x'.repeat(5000) }] })).toMatchObject({
      code: 'CONTEXT_LENGTH_EXCEEDED',
      status: 400,
      param: 'messages',
    });
    expect(await bad({ messages, sampling: { maxTokens: 100_000 } })).toMatchObject({ code: 'CONTEXT_LENGTH_EXCEEDED', param: 'max_tokens' });
    expect(await bad({ messages: [{ role: 'user', content: null }] })).toMatchObject({ code: 'INVALID_MESSAGE', param: 'messages.0.content' });
  });

  it('adds, replaces and removes served adapters, whether loaded by it or straight into the model', async () => {
    const model = engine.model as Model;
    // Loaded straight into the model: served under its own name, replaceable and removable all the same.
    await model.loadAdapter('plain', join(dir, 'a'));
    expect(engine.modelNames().map((m) => m.id)).toEqual(['m', 'plain']);
    await engine.addAdapter('plain', join(dir, 'b'), { replace: true });
    expect(engine.modelNames()).toEqual([{ id: 'm', adapter: null }, { id: 'plain', adapter: 'plain#1' }]);
    expect(model.adapterNames()).toEqual(['plain#1']);
    // Two loads at once whose engine names could meet: a replacement of `x` and a new `x#1`.
    await engine.addAdapter('x', join(dir, 'a'));
    await Promise.all([engine.addAdapter('x', join(dir, 'b'), { replace: true }), engine.addAdapter('x#1', join(dir, 'a'))]);
    const targets = new Map(engine.modelNames().map((m) => [m.id, m.adapter]));
    expect(new Set([targets.get('x'), targets.get('x#1')]).size).toBe(2);
    expect(engine.adapterDirs.get(targets.get('x')!)).toBe(join(dir, 'b'));
    expect(engine.adapterDirs.get(targets.get('x#1')!)).toBe(join(dir, 'a'));
    for (const name of ['plain', 'x', 'x#1']) await engine.removeAdapter(name);
    expect(engine.modelNames().map((m) => m.id)).toEqual(['m']);
    expect(model.adapterNames()).toEqual([]);
    await expect(engine.removeAdapter('x')).rejects.toMatchObject({ code: 'ADAPTER_NOT_FOUND', status: 404 });
    await expect(engine.removeAdapter('m')).rejects.toMatchObject({ code: 'ADAPTER_NOT_FOUND' });
  });
});
