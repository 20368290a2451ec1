/**
 * §3 of issue 12: `mcprl serve` under huge prompts. The body cap follows the model's context, a prompt that
 * cannot fit is refused by its length before the chat template and the tokenizer run, and the server goes on
 * answering. Real parts: the bundled tiny model in the real engine, served over real HTTP.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { startServer, type RunningServer } from '../../src/serve/server.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
let engine: ChatEngine;
let server: RunningServer;

beforeAll(async () => {
  engine = await ChatEngine.load(MODEL, { threads: 1 });
  server = await startServer(engine, { port: 0 });
});
afterAll(async () => {
  await server?.close();
  engine?.model.close();
});

const post = (body: string) => fetch(`${server.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
const chat = (content: string) => JSON.stringify({ model: engine.modelName, messages: [{ role: 'user', content }], max_tokens: 4 });

describe('mcprl serve and huge prompts', () => {
  it('a 30 MB prompt is refused by the body cap, which follows the model\'s context, and /health still answers', async () => {
    const cap = 6 * engine.maxPromptChars + 1024 * 1024;
    expect(cap).toBeLessThan(32 * 1024 * 1024);
    const r = await post(chat('a'.repeat(30 * 1024 * 1024)));
    expect(r.status).toBe(413);
    expect((await r.json()).error.code).toBe('request_too_large');
    const health = await fetch(`${server.url.replace(/\/v1$/, '')}/health`);
    expect(health.status).toBe(200);
    fault('30 MB prompt to `mcprl serve`', '413 before parsing; /health answers', `${r.status}; health ${health.status}`);
  });

  it('a prompt under the body cap that cannot fit the context is refused before tokenising', async () => {
    const r = await post(chat('word '.repeat(Math.ceil(engine.maxPromptChars / 5) + 10)));
    expect(r.status).toBe(400);
    const err = (await r.json()).error;
    expect(err.code).toBe('context_length_exceeded');
    expect(err.message).toContain('checked before tokenising');
    // A prompt that fits is still served.
    const ok = await post(chat('Find book bk-001.'));
    expect(ok.status).toBe(200);
    fault('prompt over the context, under the body cap', '400 by a length bound, no tokenising', `${r.status} ${err.code}`);
  });
});
