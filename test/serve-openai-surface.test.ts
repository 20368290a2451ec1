/**
 * The OpenAI surface agent frameworks use, through `mcprl serve` on the bundled tiny model, with the clients
 * themselves: the openai SDK, the Vercel AI SDK and LangChain.js. The tiny model is weak, so these tests check
 * what the constrained decoder guarantees (a call is there, of the named tool, at most one; the answer is JSON
 * valid for the schema), never the content's quality.
 */
import path from 'node:path';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { generateObject, generateText, jsonSchema, Output, tool } from 'ai';
import { Ajv } from 'ajv';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ChatEngine } from '../src/chat/chat-engine.js';
import type { Model } from '../src/engine/model.js';
import { startServer, type RunningServer } from '../src/serve/server.js';

const MODEL_DIR = path.join(import.meta.dirname, '..', 'fixtures', 'models', 'tiny-bookshop');
const NAME = 'tiny-bookshop';

let engine: ChatEngine;
let server: RunningServer;
let client: OpenAI;

beforeAll(async () => {
  engine = await ChatEngine.load(MODEL_DIR, { modelName: NAME, constrainToolCalls: true });
  server = await startServer(engine, { port: 0 });
  client = new OpenAI({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.close();
  (engine?.model as Model | undefined)?.close();
});

const tools: OpenAI.Chat.Completions.ChatCompletionFunctionTool[] = [
  {
    type: 'function',
    function: { name: 'search_books', description: 'Search the catalogue', parameters: { type: 'object', properties: { query: { type: 'string', maxLength: 12 } }, required: ['query'] } },
  },
  {
    type: 'function',
    function: { name: 'get_book', description: 'One book by id', parameters: { type: 'object', properties: { id: { type: 'integer', minimum: 1, maximum: 99 } }, required: ['id'] } },
  },
];
const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Hello there.' }];

/**
 * A schema whose every value ends within a few tokens, so that a weak model still finishes it: with at most 16
 * bytes of whitespace between JSON tokens (tool-call-grammar.ts), 600 tokens always close it.
 */
const BOOK_SCHEMA = {
  type: 'object',
  properties: {
    title: { type: 'string', maxLength: 8 },
    year: { type: 'integer', minimum: 1900, maximum: 2030 },
    genre: { enum: ['fiction', 'poetry', 'history'] },
    in_stock: { type: 'boolean' },
  },
  required: ['title', 'year', 'genre', 'in_stock'],
  additionalProperties: false,
};

const ajv = new Ajv();

async function chat(body: Record<string, unknown>): Promise<OpenAI.Chat.Completions.ChatCompletion> {
  return (await client.chat.completions.create({ model: NAME, messages, max_tokens: 600, seed: 7, ...body } as never)) as OpenAI.Chat.Completions.ChatCompletion;
}

describe('openai SDK', () => {
  it("tool_choice 'required': every sample opens with a call of one of the tools, valid for its schema", async () => {
    const r = await chat({ tools, tool_choice: 'required', n: 4, temperature: 1 });
    for (const c of r.choices) {
      expect(c.finish_reason).toBe('tool_calls');
      const call = c.message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
      const schema = tools.find((t) => t.function.name === call.function.name)!.function.parameters!;
      expect(ajv.validate(schema, JSON.parse(call.function.arguments))).toBe(true);
    }
  });

  it('tool_choice naming a function: that function is called; parallel_tool_calls false: at most one call', async () => {
    const r = await chat({ tools, tool_choice: { type: 'function', function: { name: 'get_book' } }, parallel_tool_calls: false, n: 4, temperature: 1 });
    for (const c of r.choices) {
      expect(c.message.tool_calls).toHaveLength(1);
      const call = c.message.tool_calls![0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
      expect(call.function.name).toBe('get_book');
      expect(ajv.validate(tools[1].function.parameters!, JSON.parse(call.function.arguments))).toBe(true);
    }
  });

  it('response_format json_schema: the answer parses and validates against the schema', async () => {
    const r = await chat({ response_format: { type: 'json_schema', json_schema: { name: 'book', schema: BOOK_SCHEMA, strict: true } }, n: 4, temperature: 1 });
    for (const c of r.choices) {
      expect(c.finish_reason).toBe('stop');
      expect(ajv.validate(BOOK_SCHEMA, JSON.parse(c.message.content!))).toBe(true);
    }
  });

  it('response_format json_object: the answer is a JSON object', async () => {
    // A free object can run on for as long as the model likes; greedy decoding of this prompt closes it.
    const r = await chat({ response_format: { type: 'json_object' }, temperature: 0 });
    const c = r.choices[0];
    if (c.finish_reason === 'stop') expect(typeof JSON.parse(c.message.content!)).toBe('object');
    else expect(c.message.content!.trimStart().startsWith('{')).toBe(true);
  });

  it('tools with response_format: each answer is valid calls or an object valid for the schema', async () => {
    const r = await chat({ tools, response_format: { type: 'json_schema', json_schema: { name: 'book', schema: BOOK_SCHEMA } }, n: 6, temperature: 1 });
    for (const c of r.choices) {
      if (c.message.tool_calls?.length) {
        expect(c.finish_reason).toBe('tool_calls');
        for (const call of c.message.tool_calls as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall[]) {
          expect(ajv.validate(tools.find((t) => t.function.name === call.function.name)!.function.parameters!, JSON.parse(call.function.arguments))).toBe(true);
        }
        expect(c.message.content ?? '').toBe('');
      } else {
        expect(ajv.validate(BOOK_SCHEMA, JSON.parse(c.message.content!))).toBe(true);
      }
    }
  });

  it('streams the same guarantees: a required call arrives as tool_calls deltas, a JSON answer as content', async () => {
    const calls = await client.chat.completions.create({ model: NAME, messages, tools, tool_choice: 'required', max_tokens: 600, seed: 7, stream: true });
    let name = '';
    let args = '';
    for await (const chunk of calls) {
      for (const d of chunk.choices[0]?.delta.tool_calls ?? []) {
        name += d.function?.name ?? '';
        args += d.function?.arguments ?? '';
      }
    }
    expect(tools.map((t) => t.function.name)).toContain(name);
    expect(typeof JSON.parse(args)).toBe('object');
    const json = await client.chat.completions.create({
      model: NAME, messages, max_tokens: 600, seed: 7, stream: true,
      response_format: { type: 'json_schema', json_schema: { name: 'book', schema: BOOK_SCHEMA } },
    });
    let content = '';
    for await (const chunk of json) content += chunk.choices[0]?.delta.content ?? '';
    expect(ajv.validate(BOOK_SCHEMA, JSON.parse(content))).toBe(true);
  });

  it('refuses what it cannot honour with a 400 naming the field', async () => {
    const bad = async (body: Record<string, unknown>) => {
      try {
        await chat(body);
        return null;
      } catch (err) {
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        return (err as InstanceType<typeof OpenAI.BadRequestError>).param;
      }
    };
    expect(await bad({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } })).toBe('tool_choice');
    expect(await bad({ tool_choice: 'required' })).toBe('tool_choice');
    expect(await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { not: {} } } } } } })).toBe('response_format');
    expect(await bad({ response_format: { type: 'xml' } })).toBe('response_format.type');
    expect(await bad({ presence_penalty: 0.5 })).toBe('presence_penalty');
    expect(await bad({ logit_bias: { '12': 5 } })).toBe('logit_bias');
    expect(await bad({ min_p: 0.1 })).toBe('min_p');
    expect(await bad({ function_call: 'auto' })).toBe('function_call');
    // What clients send by default, and fields that change nothing, pass.
    expect(await bad({ presence_penalty: 0, frequency_penalty: 0, user: 'u', metadata: { a: 'b' }, store: false, logit_bias: null, max_tokens: 2 })).toBeNull();
  });
});

describe('Vercel AI SDK', () => {
  /** The bodies the SDK sent, to check it asked for what the test means to exercise. */
  const sent: Record<string, unknown>[] = [];
  const provider = () =>
    createOpenAICompatible({
      name: 'mcprl', baseURL: server.url, apiKey: 'unused', supportsStructuredOutputs: true,
      fetch: async (url, init) => {
        if (typeof init?.body === 'string') sent.push(JSON.parse(init.body) as Record<string, unknown>);
        return fetch(url, init);
      },
    });

  it("generateText with toolChoice 'required' gets a tool call", async () => {
    const r = await generateText({
      model: provider()(NAME),
      prompt: 'Hello there.',
      tools: { get_book: tool({ description: 'One book by id', inputSchema: jsonSchema<{ id: number }>(tools[1].function.parameters as never) }) },
      toolChoice: 'required',
      maxOutputTokens: 600,
      seed: 7,
      maxRetries: 0,
    });
    expect(sent.at(-1)).toMatchObject({ tool_choice: 'required' });
    expect(r.toolCalls).toHaveLength(1);
    expect(r.toolCalls[0].toolName).toBe('get_book');
    expect(Number.isInteger((r.toolCalls[0].input as { id: number }).id)).toBe(true);
  });

  it('generateText with tools and an object output gets valid calls or a valid object', async () => {
    const r = await generateText({
      model: provider()(NAME),
      prompt: 'Describe a book.',
      tools: { get_book: tool({ description: 'One book by id', inputSchema: jsonSchema<{ id: number }>(tools[1].function.parameters as never) }) },
      output: Output.object({ schema: jsonSchema<Record<string, unknown>>(BOOK_SCHEMA as never) }),
      maxOutputTokens: 600,
      seed: 3,
      maxRetries: 0,
    });
    expect(sent.at(-1)).toMatchObject({ tools: [{ function: { name: 'get_book' } }], response_format: { type: 'json_schema' } });
    if (r.toolCalls.length > 0) expect(Number.isInteger((r.toolCalls[0].input as { id: number }).id)).toBe(true);
    else expect(ajv.validate(BOOK_SCHEMA, r.output)).toBe(true);
  });

  it('generateObject returns an object valid for the schema', async () => {
    const r = await generateObject({
      model: provider()(NAME),
      prompt: 'Describe a book.',
      schema: jsonSchema<{ title: string; year: number; genre: string; in_stock: boolean }>(BOOK_SCHEMA as never),
      maxOutputTokens: 600,
      seed: 7,
      maxRetries: 0,
    });
    expect(sent.at(-1)).toMatchObject({ response_format: { type: 'json_schema' } });
    expect(ajv.validate(BOOK_SCHEMA, r.object)).toBe(true);
  });
});

describe('LangChain.js', () => {
  const sent: Record<string, unknown>[] = [];
  const capture: typeof fetch = async (url, init) => {
    if (typeof init?.body === 'string') sent.push(JSON.parse(init.body) as Record<string, unknown>);
    return fetch(url, init);
  };
  const llm = () => new ChatOpenAI({ model: NAME, apiKey: 'unused', configuration: { baseURL: server.url, fetch: capture }, maxTokens: 600, maxRetries: 0, temperature: 1 });
  const asked = { jsonSchema: { response_format: { type: 'json_schema' } }, functionCalling: { tool_choice: { type: 'function' } } };
  const Book = z.object({ title: z.string().max(8), year: z.number().int().min(1900).max(2030), in_stock: z.boolean() });

  for (const method of ['jsonSchema', 'functionCalling'] as const) {
    it(`withStructuredOutput (${method}) returns an object valid for the schema`, async () => {
      const out = await llm().withStructuredOutput(Book, { method }).invoke('Describe a book.');
      expect(sent.at(-1)).toMatchObject(asked[method]);
      expect(Book.safeParse(out).success).toBe(true);
    });
  }
});
