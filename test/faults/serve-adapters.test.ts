/**
 * §3 and §4 of issue 42, `mcprl serve`'s runtime adapters: how many it holds is bounded (`maxAdapters`, the CLI's
 * `--max-adapters`), and `/v1/unload_lora_adapter` while a request runs on the adapter stops the name at once (new
 * requests get model_not_found) while the running request finishes on it. Real parts: the bundled tiny model in the
 * real engine over real HTTP, adapters written by scripts/random-model.ts. Nothing waits on time: the unload runs
 * from inside the running request's generate() call, so it happens after that request resolved its adapter and
 * before it samples a token.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeRandomAdapter, type RandomModelOptions } from '../../scripts/random-model.js';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import type { Model } from '../../src/engine/model.js';
import { startServer, type RunningServer } from '../../src/serve/server.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const TINY = join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const TINY_SHAPE: RandomModelOptions = { arch: 'qwen3', hiddenSize: 128, numLayers: 4, numHeads: 4, numKvHeads: 2, headDim: 32, intermediateSize: 384, vocabSize: 1024 };

let dir: string;
let engine: ChatEngine;
let server: RunningServer;
const model = () => engine.model as Model;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-serve-adapters-'));
  for (const [name, seed] of [['startup', 1], ['a', 2], ['b', 3], ['c', 4]] as const) await makeRandomAdapter(join(dir, name), TINY_SHAPE, { seed });
  engine = await ChatEngine.load(TINY, { adapters: [{ name: 'startup', dir: join(dir, 'startup') }], threads: 1 });
  server = await startServer(engine, { port: 0, loraUpdating: true, maxAdapters: 2 });
}, 60_000);
afterAll(async () => {
  await server?.close();
  engine?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function post(path: string, body: unknown): Promise<{ status: number; json: () => any }> {
  const res = await fetch(server.url.replace(/\/v1$/, '') + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: () => JSON.parse(text) };
}
const load = (name: string, folder = name, inplace = false) => post('/v1/load_lora_adapter', { lora_name: name, lora_path: join(dir, folder), load_inplace: inplace });
const unload = (name: string) => post('/v1/unload_lora_adapter', { lora_name: name });
const chat = (name: string) => post('/v1/chat/completions', { model: name, messages: [{ role: 'user', content: 'Is bk-007 in stock?' }], max_tokens: 3, seed: 1 });
const served = async () => ((await (await fetch(`${server.url}/models`)).json()) as { data: { id: string }[] }).data.map((m) => m.id);

describe('mcprl serve: adapters', () => {
  it('holds at most maxAdapters: a load of a new name past it is refused 400, a replacement is not', async () => {
    expect((await load('a')).status).toBe(200);
    const over = await load('b');
    expect(over.status).toBe(400);
    expect(over.json().error.message).toMatch(/holds 2 adapters, its most \(--max-adapters 2\)/);
    expect(model().adapterNames()).not.toContain('b');
    expect((await load('a', 'c', true)).status).toBe(200);
    expect((await unload('a')).status).toBe(200);
    // One place free and two loads of new names at once: exactly one gets it, whichever is handled first.
    const both = await Promise.all([load('b'), load('c')]);
    expect(both.map((r) => r.status).sort()).toEqual([200, 400]);
    expect(await served()).toHaveLength(3); // the base model and two adapters
    for (const name of ['b', 'c']) await unload(name).catch(() => undefined);
    fault('adapter loads past `mcprl serve --max-adapters`', '400 naming the bound; replacing a served name allowed', `3rd name ${over.status}; replace 200; two racing for one place: ${both.map((r) => r.status).sort().join(', ')}`);
  });

  it('unload while a request runs on the adapter: new requests get model_not_found at once, the running one finishes', async () => {
    const names = await served();
    const [loadable] = ['a', 'b', 'c'].filter((n) => !names.includes(n));
    expect((await load(loadable)).status).toBe(200);
    const m = model();
    const original = m.generate;
    let during: { unload: number; again: number; code: string; listed: string[]; loaded: string[] } | null = null;
    // Runs once the running request has resolved its adapter, before it samples: the unload and a new request.
    m.generate = async (req) => {
      m.generate = original;
      const u = await unload(loadable);
      const again = await chat(loadable);
      during = { unload: u.status, again: again.status, code: again.status === 200 ? 'served' : again.json().error.code, listed: await served(), loaded: m.adapterNames() };
      return original.call(m, req);
    };
    let running: { status: number; json: () => any };
    try {
      running = await chat(loadable);
    } finally {
      m.generate = original;
    }
    expect(during).not.toBeNull();
    expect(during!.unload).toBe(200);
    expect(during!.again).toBe(404);
    expect(during!.code).toBe('model_not_found');
    expect(during!.listed).not.toContain(loadable);
    // Still loaded for the request running on it…
    expect(during!.loaded).toContain(loadable);
    // …which finishes on it; then it is gone.
    expect(running!.status).toBe(200);
    expect(running!.json().mcprl_adapter).toBe(loadable);
    expect(m.adapterNames()).not.toContain(loadable);
    expect((await chat(loadable)).status).toBe(404);
    fault(
      '/v1/unload_lora_adapter while a request runs on the adapter',
      'new requests model_not_found at once; the running one finishes on it',
      `new request during: ${during!.again} ${during!.code}; running: ${running!.status} on ${running!.json().mcprl_adapter}; unloaded after`,
    );
  });
});
