/**
 * §3 of issue 12: `mcprl serve` under huge prompts. The body cap follows the model's context, a prompt that
 * cannot fit is refused by its length before the chat template and the tokenizer run, and the server goes on
 * answering. Real parts: the bundled tiny model in the real engine, served over real HTTP.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
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

  it('a long prompt under the bound is tokenised off the event loop: /health answers while it is', async () => {
    // The tokenising job is held in the worker by a shared flag until /health has answered, so the order is
    // certain: the server answered while that prompt was still being tokenised.
    const flag = new Int32Array(new SharedArrayBuffer(4));
    const tok = engine.tokenizer;
    const offThread = tok.encodeOffThread.bind(tok);
    let inWorker!: () => void;
    const tokenising = new Promise<void>((r) => (inWorker = r));
    const spy = vi.spyOn(tok, 'encodeOffThread').mockImplementation((text, o) => {
      inWorker();
      return offThread(text, { ...o, hold: flag });
    });
    const onThisThread = vi.spyOn(tok, 'encode');
    try {
      const content = 'word '.repeat(Math.floor(engine.maxPromptChars / 5) - 100);
      expect(content.length).toBeGreaterThan(32_768);
      let answered = false;
      const pending = post(chat(content)).then((r) => ((answered = true), r));
      await Promise.race([tokenising, pending.then(() => Promise.reject(new Error('answered without tokenising on the worker')))]);
      const health = await fetch(`${server.url.replace(/\/v1$/, '')}/health`);
      expect(health.status).toBe(200);
      expect(answered).toBe(false);
      Atomics.store(flag, 0, 1);
      Atomics.notify(flag, 0);
      const r = await pending;
      // It does not fit the tiny model's 2,048 tokens: refused by its token count, which the worker counted.
      expect(r.status).toBe(400);
      expect((await r.json()).error.message).toMatch(/^The prompt is \d+ tokens/);
      expect(onThisThread.mock.calls.filter(([text]) => text.length > 32_768)).toEqual([]);
      // The worker's ids are remembered: tokenising the same prompt again (as training does) needs no encode here.
      const again = engine.promptIds({ messages: [{ role: 'user', content }] });
      expect(again.length).toBeGreaterThan(2048);
      expect(onThisThread.mock.calls.filter(([text]) => text.length > 32_768)).toEqual([]);
      fault('long prompt under the length bound to `mcprl serve`', 'tokenised on a worker thread; /health answers meanwhile', `health ${health.status} while tokenising; then ${r.status}`);
    } finally {
      Atomics.store(flag, 0, 1);
      Atomics.notify(flag, 0);
      spy.mockRestore();
      onThisThread.mockRestore();
    }
  });
});
