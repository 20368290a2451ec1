/**
 * Tool calls, stop strings and truncation through `mcprl serve`, on a scripted model: a real Qwen3-shaped
 * model whose weights make it write one known reply (see test/helpers/scripted-model.ts), so that the
 * tests know what the engine will produce and can check the exact OpenAI shapes.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen3TokenizerDir } from '../scripts/random-model.js';
import { ChatEngine } from '../src/chat/chat-engine.js';
import type { Model } from '../src/engine/model.js';
import { startServer, type RunningServer } from '../src/serve/server.js';
import { HfTokenizer } from '../src/chat/tokenizer.js';
import { makeScriptedModel } from './helpers/scripted-model.js';

type Choice = OpenAI.Chat.Completions.ChatCompletion.Choice & {
  mcprl_token_ids: number[];
  mcprl_invalid_tool_calls?: { raw: string; error: string }[];
};
type ChunkChoice = OpenAI.Chat.Completions.ChatCompletionChunk.Choice & { mcprl_token_ids?: number[] };

// What the scripted model says after "<|im_start|>assistant\n" (the prompt's last token is "\n").
const REPLY = 'Let me check.<tool_call>{"name":"lookup","arguments":{"q":1}}</tool_call>';
const NAME = 'scripted';

let dir: string;
let engine: ChatEngine;
let server: RunningServer;
let client: OpenAI;
let replyIds: number[];

const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'lookup', description: 'Look something up', parameters: { type: 'object', properties: { q: { type: 'integer' } } } } },
];
const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Find q.' }];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-serve-tools-'));
  const tok = await HfTokenizer.load(qwen3TokenizerDir());
  replyIds = tok.encode(REPLY + '<|im_end|>');
  await makeScriptedModel(join(dir, NAME), [tok.encode('\n')[0], ...replyIds]);
  engine = await ChatEngine.load(join(dir, NAME));
  server = await startServer(engine, { port: 0 });
  client = new OpenAI({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.close();
  (engine?.model as Model | undefined)?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function chat(body: Record<string, unknown>): Promise<Choice> {
  const r = await client.chat.completions.create({ model: NAME, messages, tools, ...body } as never);
  return (r as OpenAI.Chat.Completions.ChatCompletion).choices[0] as Choice;
}

describe('tool calls through mcprl serve', () => {
  it('returns the call as tool_calls and the text before it as content', async () => {
    const c = await chat({ seed: 1 });
    expect(c.finish_reason).toBe('tool_calls');
    expect(c.message.content).toBe('Let me check.');
    expect(c.message.tool_calls).toHaveLength(1);
    const call = c.message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
    expect(call.type).toBe('function');
    expect(call.id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(call.function).toEqual({ name: 'lookup', arguments: '{"q": 1}' });
    // The exact sampled ids, end-of-turn token included.
    expect(c.mcprl_token_ids).toEqual(replyIds);
    expect(c.mcprl_invalid_tool_calls).toBeUndefined();
  });

  it('streams the content, then the tool call, then the finish reason', async () => {
    const stream = await client.chat.completions.create({ model: NAME, messages, tools, stream: true } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
    let content = '';
    const ids: number[] = [];
    const calls: OpenAI.Chat.Completions.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const ch of chunk.choices as ChunkChoice[]) {
        content += ch.delta.content ?? '';
        calls.push(...(ch.delta.tool_calls ?? []));
        ids.push(...(ch.mcprl_token_ids ?? []));
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    expect(content).toBe('Let me check.');
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ index: 0, type: 'function', function: { name: 'lookup', arguments: '{"q": 1}' } });
    expect(ids).toEqual(replyIds);
    expect(finish).toBe('tool_calls');
  });

  it('leaves the tags in the content with tool_choice none (and no tools in the prompt)', async () => {
    const r = (await client.chat.completions.create({ model: NAME, messages, tools, tool_choice: 'none' })) as OpenAI.Chat.Completions.ChatCompletion;
    const c = r.choices[0];
    expect(c.message.content).toBe(REPLY);
    expect(c.message.tool_calls).toBeUndefined();
    expect(c.finish_reason).toBe('stop');
    const bare = engine.tokenizer.encode(engine.template.render(messages as never));
    expect(r.usage!.prompt_tokens).toBe(bare.length);
  });

  it('reports a call cut off by max_tokens as invalid, not as an error, with the raw text as content', async () => {
    const c = await chat({ max_tokens: 8 });
    expect(c.finish_reason).toBe('length');
    // As vLLM's tool parsers do: no call could be read, so a standard client sees everything the model wrote.
    const raw = engine.tokenizer.decode(replyIds.slice(0, 8), { skipSpecialTokens: true });
    expect(raw.startsWith('Let me check.<tool_call>{')).toBe(true);
    expect(c.message.content).toBe(raw);
    expect(c.message.tool_calls).toBeUndefined();
    expect(c.mcprl_token_ids).toEqual(replyIds.slice(0, 8));
    expect(c.mcprl_invalid_tool_calls).toHaveLength(1);
    expect(c.mcprl_invalid_tool_calls![0].error).toMatch(/unterminated/);
    expect(raw).toContain(c.mcprl_invalid_tool_calls![0].raw);

    // A stream ends with the same content: the text before the call as it comes, then the rest at the end.
    const stream = await client.chat.completions.create({ model: NAME, messages, tools, max_tokens: 8, stream: true } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
    let content = '';
    let invalid: unknown;
    for await (const chunk of stream) {
      for (const ch of chunk.choices as (ChunkChoice & { mcprl_invalid_tool_calls?: unknown })[]) {
        content += ch.delta.content ?? '';
        invalid ??= ch.mcprl_invalid_tool_calls;
      }
    }
    expect(content).toBe(raw);
    expect(invalid).toEqual(c.mcprl_invalid_tool_calls);
  });

  it('stops at a stop string, keeps the ids up to the token that completed it, and streams the same', async () => {
    const c = await chat({ stop: ['check', 'never'] });
    expect(c.finish_reason).toBe('stop');
    expect(c.message.content).toBe('Let me ');
    expect(c.message.tool_calls).toBeUndefined();
    expect(c.mcprl_token_ids).toEqual(replyIds.slice(0, 3));

    const stream = await client.chat.completions.create({ model: NAME, messages, tools, stop: 'check', n: 2, stream: true } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
    const content = ['', ''];
    const ids: number[][] = [[], []];
    for await (const chunk of stream) {
      for (const ch of chunk.choices as ChunkChoice[]) {
        content[ch.index] += ch.delta.content ?? '';
        ids[ch.index].push(...(ch.mcprl_token_ids ?? []));
      }
    }
    expect(content).toEqual(['Let me ', 'Let me ']);
    expect(ids).toEqual([replyIds.slice(0, 3), replyIds.slice(0, 3)]);
  });

  it('renders a conversation with the call and its result back through the template', async () => {
    const first = await chat({});
    const history: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
      ...messages,
      { role: 'assistant', content: first.message.content, tool_calls: first.message.tool_calls },
      { role: 'tool', tool_call_id: first.message.tool_calls![0].id, content: '{"answer": 42}' },
    ];
    const r = (await client.chat.completions.create({ model: NAME, messages: history, tools })) as OpenAI.Chat.Completions.ChatCompletion;
    const rendered = engine.template.render(history as never, { tools: tools as never });
    expect(rendered).toContain('<|im_start|>assistant\nLet me check.\n<tool_call>\n{"name": "lookup", "arguments": {"q": 1}}\n</tool_call><|im_end|>');
    expect(rendered).toContain('<|im_start|>user\n<tool_response>\n{"answer": 42}\n</tool_response><|im_end|>\n<|im_start|>assistant\n');
    expect(r.usage!.prompt_tokens).toBe(engine.tokenizer.encode(rendered).length);
    // The prompt again ends with "\n", so the scripted model answers the same way.
    expect((r.choices[0] as Choice).mcprl_token_ids).toEqual(replyIds);
  });
});
