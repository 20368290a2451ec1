/**
 * §2 of issue 42: no web page can drive mcprl's local servers. `mcprl serve`, `mcprl backend` and `mcprl mcp --http`
 * share one guard (src/util/http-guard.ts): a foreign Host or Origin is refused 403 and a body that is not
 * application/json 415, before any handler runs; binding beyond loopback needs a token, loopback is an address (a
 * name counts only when it resolves to loopback alone), and a blank token is refused. Real parts: the servers over
 * real HTTP in this process, the bundled tiny model in the real engine, the real `mcprl` command line.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { startBackendServer, type RunningBackendServer } from '../../src/backend/server.js';
import { SafetyPolicy } from '../../src/mcp/index.js';
import { createContext } from '../../src/mcp-server/server.js';
import { serveHttp } from '../../src/mcp-server/serve.js';
import { Workspace } from '../../src/mcp-server/workspace.js';
import { startServer, type RunningServer } from '../../src/serve/server.js';
import { checkToken, isLoopback } from '../../src/util/http-guard.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { TINY_MODEL } from '../backend-helpers.js';
import { mcprl } from './cli.js';
import { fault } from './fault-table.js';

const TINY = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const EVIL = 'http://evil.example';

/** A raw POST with exactly these headers (fetch would not send a foreign Host). */
function raw(url: string, headers: Record<string, string>, body: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { 'content-length': String(Buffer.byteLength(body)), ...headers } }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

let root: string;
beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'mcprl-http-guard-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('mcprl backend: a cross-site page cannot delete a model', () => {
  let backend: RunningBackendServer;
  const key = { project: 'p', name: 'victim' };
  beforeAll(async () => {
    backend = await startBackendServer({ dir: path.join(root, 'store'), port: 0 });
    const r = await fetch(`${backend.url}/backend/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ settings: { ...key, baseModel: TINY_MODEL } }),
    });
    expect(r.status).toBe(200);
  }, 60_000);
  afterAll(async () => backend?.close());

  it('refuses text/plain JSON from a foreign origin (403), text/plain from none (415), a foreign Host (403)', async () => {
    const host = new URL(backend.url).host;
    const body = JSON.stringify({ model: key });
    const url = `${backend.url}/backend/delete`;
    // What a page posts: a "simple" request, no preflight, its own Origin.
    const page = await raw(url, { host, origin: EVIL, 'content-type': 'text/plain;charset=UTF-8' }, body);
    expect(page.status).toBe(403);
    expect(JSON.parse(page.text).error.code).toBe('forbidden_origin');
    const plain = await raw(url, { host, 'content-type': 'text/plain' }, body);
    expect(plain.status).toBe(415);
    const form = await raw(url, { host, 'content-type': 'application/x-www-form-urlencoded' }, body);
    expect(form.status).toBe(415);
    // DNS rebinding: the page's own name in Host, its own origin in Origin (so "same origin" would pass).
    const rebound = await raw(url, { host: `attacker.example:${backend.port}`, origin: `http://attacker.example:${backend.port}`, 'content-type': 'application/json' }, body);
    expect(rebound.status).toBe(403);
    expect(JSON.parse(rebound.text).error.code).toBe('forbidden_host');
    // The chat routes the backend serves are behind the same guard.
    const chat = await raw(`${backend.url}/v1/chat/completions`, { host, origin: EVIL, 'content-type': 'text/plain' }, '{}');
    expect(chat.status).toBe(403);
    // The model is still there; its own client, same origin and JSON, still reaches it.
    const list = await raw(`${backend.url}/backend/checkpoints`, { host, origin: `http://${host}`, 'content-type': 'application/json' }, body);
    expect(list.status).toBe(200);
    fault(
      'cross-site text/plain POST to `mcprl backend` /backend/delete',
      '403 foreign Origin or Host, 415 non-JSON body, before the handler',
      `origin ${page.status}, text/plain ${plain.status}, form ${form.status}, rebound Host ${rebound.status}; model kept (${list.status})`,
    );
  });
});

describe('mcprl serve and mcprl mcp --http: the same guard', () => {
  let engine: ChatEngine;
  let serve: RunningServer;
  let mcp: { url: string; close: () => Promise<void> };
  beforeAll(async () => {
    engine = await ChatEngine.load(TINY, { threads: 1 });
    serve = await startServer(engine, { port: 0, loraUpdating: true });
    const ctx = createContext(new Workspace(path.join(root, 'ws'), []), new SafetyPolicy({ remedyFor: 'mcp' }));
    mcp = await serveHttp(ctx, { port: 0 });
  }, 60_000);
  afterAll(async () => {
    await mcp?.close();
    await serve?.close();
    engine?.close();
  });

  it('serve: a page cannot load or unload adapters, nor post text/plain chat requests', async () => {
    const host = new URL(serve.url).host;
    const unload = JSON.stringify({ lora_name: 'x' });
    const page = await raw(`http://${host}/v1/unload_lora_adapter`, { host, origin: EVIL, 'content-type': 'text/plain' }, unload);
    expect(page.status).toBe(403);
    const plain = await raw(`http://${host}/v1/load_lora_adapter`, { host, 'content-type': 'text/plain' }, JSON.stringify({ lora_name: 'x', lora_path: TINY }));
    expect(plain.status).toBe(415);
    expect(JSON.parse(plain.text).error.code).toBe('unsupported_media_type');
    const chat = JSON.stringify({ model: engine.modelName, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
    const rebound = await raw(`http://${host}/v1/chat/completions`, { host: `rebind.example:${serve.port}`, 'content-type': 'application/json' }, chat);
    expect(rebound.status).toBe(403);
    // Its own page (same origin) and plain clients (no Origin) are served.
    const own = await raw(`http://${host}/v1/chat/completions`, { host, origin: `http://${host}`, 'content-type': 'application/json' }, chat);
    expect(own.status).toBe(200);
    fault(
      'cross-site text/plain POST to `mcprl serve` adapter and chat routes',
      '403 foreign Origin or Host, 415 non-JSON body',
      `origin ${page.status}, text/plain ${plain.status}, rebound Host ${rebound.status}; same origin ${own.status}`,
    );
  });

  it('mcp --http: a text/plain initialize is 415 (the page\'s request never reaches the SDK)', async () => {
    const host = new URL(mcp.url).host;
    const init = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '0' } } });
    const plain = await raw(mcp.url, { host, accept: 'application/json, text/event-stream', 'content-type': 'text/plain' }, init);
    expect(plain.status).toBe(415);
    const page = await raw(mcp.url, { host, origin: EVIL, accept: 'application/json, text/event-stream', 'content-type': 'application/json' }, init);
    expect(page.status).toBe(403);
    const ok = await raw(mcp.url, { host, accept: 'application/json, text/event-stream', 'content-type': 'application/json' }, init);
    expect(ok.status).toBe(200);
    fault('text/plain POST to `mcprl mcp --http`', '415 before the SDK reads it', `text/plain ${plain.status}; foreign origin ${page.status}; JSON ${ok.status}`);
  });
});

describe('binding: loopback is an address, and a token is not blank', () => {
  it('a name is loopback only when it resolves to loopback alone', async () => {
    expect(await isLoopback('127.0.0.1')).toBe(true);
    expect(await isLoopback('127.1.2.3')).toBe(true);
    expect(await isLoopback('::1')).toBe(true);
    expect(await isLoopback('[::1]')).toBe(true);
    expect(await isLoopback('localhost')).toBe(true);
    // A name that starts like a loopback address is a name: it does not resolve here, so it is not loopback.
    expect(await isLoopback('127.attacker.example')).toBe(false);
    expect(await isLoopback('0.0.0.0')).toBe(false);
    expect(await isLoopback('::')).toBe(false);
    await expect(startBackendServer({ dir: path.join(root, 'b2'), host: '127.attacker.example', port: 0 })).rejects.toMatchObject({ code: 'SERVER_CONFIG' });
    expect(() => checkToken('  \t ')).toThrow(/empty or only whitespace/);
    fault('`127.attacker.example` as a bind address without a token', 'not loopback: refused without a token', 'isLoopback false; backend start refused SERVER_CONFIG');
  });

  it('mcprl serve and mcprl backend refuse a non-loopback bind without a token, and a blank token, before loading anything', async () => {
    const runs = await Promise.all([
      mcprl(['serve', '--model', TINY, '--host', '0.0.0.0', '--port', '0'], { timeoutMs: 60_000 }),
      mcprl(['backend', '--dir', path.join(root, 'b3'), '--host', '0.0.0.0', '--port', '0'], { timeoutMs: 60_000 }),
      mcprl(['backend', '--dir', path.join(root, 'b4'), '--token', '   ', '--port', '0'], { timeoutMs: 60_000 }),
      mcprl(['serve', '--model', TINY, '--token', ' ', '--port', '0'], { timeoutMs: 60_000 }),
    ]);
    for (const r of runs) {
      expect(r.code, r.stderr).toBe(1);
      expect(r.stdout).not.toMatch(/listening/);
    }
    expect(runs[0].stderr).toMatch(/SERVER_CONFIG: refusing to bind mcprl serve to 0\.0\.0\.0 without a token/);
    expect(runs[1].stderr).toMatch(/SERVER_CONFIG: refusing to bind mcprl backend to 0\.0\.0\.0 without a token/);
    expect(runs[2].stderr).toMatch(/empty or only whitespace/);
    expect(runs[3].stderr).toMatch(/empty or only whitespace/);
    fault('`mcprl serve`/`backend` on 0.0.0.0 without a token; a whitespace --token', 'refused at start, naming why', runs.map((r) => `exit ${r.code}`).join(', '));
  }, 120_000);
});
