// The LLM scenario path against a local OpenAI-compatible test double (test/doubles/openai-double.ts), which
// stands in for a remote LLM API that cannot run here. The OpenAI SDK and our generator are real.
import { afterEach, describe, expect, it } from 'vitest';
import type { ToolInfo } from '../src/mcp/index.js';
import { buildPrompt, generateLlmScenarios, ScenarioGenerationError } from '../src/scenarios/llm.js';
import { extractJson } from '../src/util/extract-json.js';
import { ScenarioSchema } from '../src/scenarios/scenario.js';
import { chatReply, httpError, startOpenAIDouble, type OpenAIDouble } from './doubles/openai-double.js';

const TOOLS: ToolInfo[] = [
  {
    name: 'get_book',
    description: 'Full record of one book.',
    inputSchema: { type: 'object', properties: { book_id: { type: 'string' } }, required: ['book_id'] },
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  },
];
const CATALOG = { serverName: 'bookshop', tools: TOOLS };

const TASKS = [
  'How much does the book "The Quiet Orchard" cost?',
  'Which authors in the shop come from Japan?',
  'Order two copies of the cheapest mystery novel for Ann (ann@example.com).',
  'Is "The Glass Fox" in stock right now, and how many copies are there?',
  'Convert the price of "The Winter Atlas" to euros.',
  'List every poetry book published before 1980.',
];
const answer = (tasks: string[], difficulty: unknown = 2) => JSON.stringify({ scenarios: tasks.map((task) => ({ task, difficulty })) });

let llm: OpenAIDouble | undefined;
afterEach(async () => {
  await llm?.close();
  llm = undefined;
});

const opts = (extra: object = {}) => ({ baseURL: llm!.baseURL, apiKey: 'test-key', model: 'gen-model', maxRetries: 1, ...extra });

describe('LLM scenario generation', () => {
  it('valid JSON: N scenarios, json_schema requested, catalog and instructions in the prompt', async () => {
    llm = await startOpenAIDouble([chatReply(answer(TASKS.slice(0, 4), 3))]);
    const r = await generateLlmScenarios(CATALOG, opts({ count: 4, instructions: 'Focus on stock questions.' }));
    expect(r.scenarios.map((s) => s.task)).toEqual(TASKS.slice(0, 4));
    for (const s of r.scenarios) expect(ScenarioSchema.parse(s)).toEqual({ id: expect.stringMatching(/^llm-/), task: s.task, difficulty: 3, source: 'llm' });
    expect(r.attempts).toBe(1);
    expect(r.responseFormat).toBe('json_schema');
    const req = llm.requests[0].body;
    expect(req.model).toBe('gen-model');
    expect(req.response_format.type).toBe('json_schema');
    const prompt = req.messages.map((m: { content: string }) => m.content).join('\n');
    expect(prompt).toContain('get_book');
    expect(prompt).toContain('Focus on stock questions.');
    expect(llm.requests[0].headers.authorization).toBe('Bearer test-key');
  });

  it('invalid JSON then valid: asks again and succeeds', async () => {
    llm = await startOpenAIDouble([chatReply('Sure! Here are some tasks: {not json'), chatReply(answer(TASKS.slice(0, 3)))]);
    const r = await generateLlmScenarios(CATALOG, opts({ count: 3 }));
    expect(r.scenarios).toHaveLength(3);
    expect(r.attempts).toBe(2);
    expect(r.droppedInvalid).toBe(1);
  });

  it('too few scenarios per answer: keeps asking for the remainder and shows what it already has', async () => {
    llm = await startOpenAIDouble([chatReply(answer(TASKS.slice(0, 2))), chatReply(answer(TASKS.slice(2, 4))), chatReply(answer(TASKS.slice(4, 6)))]);
    const r = await generateLlmScenarios(CATALOG, opts({ count: 5 }));
    expect(r.scenarios.map((s) => s.task)).toEqual(TASKS.slice(0, 5));
    expect(r.attempts).toBe(3);
    expect(llm.requests[1].body.messages[1].content).toContain(TASKS[0]);
  });

  it('invalid items and near-duplicates are dropped and counted', async () => {
    const items = [
      { task: TASKS[0], difficulty: 1 },
      { task: 'How much does the book "The Quiet Orchard" cost', difficulty: 2 }, // near-duplicate
      { task: 'x', difficulty: 2 }, // too short
      { task: TASKS[1], difficulty: 9 }, // out of range
      { task: TASKS[2], difficulty: '4' }, // quoted number: accepted
    ];
    llm = await startOpenAIDouble([chatReply(JSON.stringify({ scenarios: items }))]);
    const r = await generateLlmScenarios(CATALOG, opts({ count: 2 }));
    expect(r.scenarios.map((s) => [s.task, s.difficulty])).toEqual([
      [TASKS[0], 1],
      [TASKS[2], 4],
    ]);
    expect(r.droppedDuplicates).toBe(1);
    expect(r.droppedInvalid).toBe(2);
  });

  it('json_schema rejected (400) → json_object; that rejected too → plain text with JSON extraction', async () => {
    llm = await startOpenAIDouble([
      httpError(400, "response_format 'json_schema' is not supported"),
      httpError(400, "response_format 'json_object' is not supported"),
      chatReply('Here you go:\n```json\n' + answer(TASKS.slice(0, 2)) + '\n```\nEnjoy.'),
    ]);
    const r = await generateLlmScenarios(CATALOG, opts({ count: 2 }));
    expect(r.scenarios).toHaveLength(2);
    expect(r.responseFormat).toBe('text');
    expect(llm.requests.map((q) => q.body.response_format?.type)).toEqual(['json_schema', 'json_object', undefined]);
  });

  it('HTTP 500 then success: the request is retried', async () => {
    llm = await startOpenAIDouble([httpError(500, 'upstream overloaded'), chatReply(answer(TASKS.slice(0, 2)))]);
    const r = await generateLlmScenarios(CATALOG, opts({ count: 2 }));
    expect(r.scenarios).toHaveLength(2);
    expect(llm.requests).toHaveLength(2);
  });

  it('permanent 500: a clear ScenarioGenerationError after a bounded number of requests', async () => {
    llm = await startOpenAIDouble([], { fallback: httpError(500, 'upstream down') });
    const err = await generateLlmScenarios(CATALOG, opts({ count: 2 })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ScenarioGenerationError);
    expect((err as Error).message).toMatch(/HTTP 500.*upstream down/);
    expect(llm.requests).toHaveLength(2); // one try + maxRetries 1
  });

  it('401: the message points at the API key', async () => {
    llm = await startOpenAIDouble([httpError(401, 'invalid api key')]);
    await expect(generateLlmScenarios(CATALOG, opts({ count: 2, maxRetries: 0 }))).rejects.toThrow(/HTTP 401.*API key/);
  });

  it('never enough valid scenarios: fails after maxAttempts with what it got', async () => {
    llm = await startOpenAIDouble([], { fallback: chatReply('I cannot help with that.') });
    await expect(generateLlmScenarios(CATALOG, opts({ count: 3, maxAttempts: 3 }))).rejects.toThrow(/got 0 of 3 valid scenarios .* after 3 requests/);
    expect(llm.requests).toHaveLength(3);
  });

  it('extractJson finds JSON in fenced blocks and prose; buildPrompt never asks to name tools', () => {
    expect(extractJson('```json\n{"a":1}\n```')).toEqual({ a: 1 });
    expect(extractJson('text before {"a":[1,2]} after')).toEqual({ a: [1, 2] });
    expect(extractJson('nothing here')).toBeUndefined();
    const p = buildPrompt(CATALOG, 5)[1].content as string;
    expect(p).toContain('Never name the tools');
    expect(p).toContain('Write 5 realistic');
  });
});

describe('grounded prompt', () => {
  it('carries at most PROMPT_ENTITIES entities, taken in turn from each key, each with the tool that showed it', async () => {
    const { promptEntities, PROMPT_ENTITIES } = await import('../src/scenarios/llm.js');
    const many = [
      ...Array.from({ length: 200 }, (_, i) => ({ key: 'id', value: `bk-${i}`, tool: 'search_books' })),
      { key: 'path', value: '/data/notes.txt', tool: 'list_directory' },
      { key: 'name', value: 'x'.repeat(500), tool: 'read_graph' },
    ];
    const shown = promptEntities(many);
    expect(shown).toHaveLength(PROMPT_ENTITIES);
    expect(shown.slice(0, 2)).toEqual([many[0], many[200]]);
    const p = buildPrompt(CATALOG, 3, { entities: many })[1].content as string;
    expect(p).toContain('- path = "/data/notes.txt" (shown by list_directory)');
    expect(p).not.toContain('x'.repeat(500));
    expect(p).not.toContain('"bk-199"');
  });
});
