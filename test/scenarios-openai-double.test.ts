// Checks the OpenAI test double itself (it stands in for a remote LLM API in other tests) with the real SDK.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { chatReply, httpError, startOpenAIDouble, toolCallReply, type OpenAIDouble } from './doubles/openai-double.js';

let llm: OpenAIDouble | undefined;
afterEach(async () => {
  await llm?.close();
  llm = undefined;
});

describe('openai-double', () => {
  it('serves scripted replies in order, records requests, and fails loudly when the script runs out', async () => {
    llm = await startOpenAIDouble([
      httpError(400, 'bad'),
      chatReply('hello'),
      (req) => chatReply(`model was ${req.body.model}`),
    ]);
    const client = new OpenAI({ baseURL: llm.baseURL, apiKey: 'k', maxRetries: 0 });
    await expect(client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] })).rejects.toMatchObject({ status: 400 });
    const r1 = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    expect(r1.choices[0].message.content).toBe('hello');
    const r2 = await client.chat.completions.create({ model: 'qq', messages: [{ role: 'user', content: 'hi' }] });
    expect(r2.choices[0].message.content).toBe('model was qq');
    await expect(client.chat.completions.create({ model: 'm', messages: [] })).rejects.toThrow(/no scripted reply left/);
    expect(llm.requests.map((r) => r.path)).toEqual(Array(4).fill('/v1/chat/completions'));
    expect(llm.requests[1].body.messages[0].content).toBe('hi');
    expect(llm.requests[0].headers.authorization).toBe('Bearer k');
  });

  it('streams tool calls when asked', async () => {
    llm = await startOpenAIDouble([toolCallReply([{ name: 'get_book', arguments: { book_id: 'bk-001' } }])]);
    const client = new OpenAI({ baseURL: llm.baseURL, apiKey: 'k', maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'x' }] });
    let args = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const tc of chunk.choices[0]?.delta.tool_calls ?? []) args += tc.function?.arguments ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(JSON.parse(args)).toEqual({ book_id: 'bk-001' });
    expect(finish).toBe('tool_calls');
  });
});
