/**
 * §3 of issue 42: no request can take a server down. Structure is bounded on the body's bytes before JSON.parse
 * (depth, array length: src/util/json-limits.ts), validation stops at the first invalid element, and client errors
 * are 4xx naming the field, never 500. Real parts: `mcprl serve` on the bundled tiny model and `mcprl backend`, over
 * real HTTP in this process. (Peak memory and /health latency during such a request: bench/request-bounds.bench.ts.)
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startBackendServer, type RunningBackendServer } from '../../src/backend/server.js';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { chatRequestSchema } from '../../src/serve/openai-chat.js';
import { startServer, type RunningServer } from '../../src/serve/server.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const TINY = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');

/** `n` numbers as a JSON array, written without building the array. */
const numbers = (n: number) => `[${'1,'.repeat(n - 1)}1]`;
/** A tool schema nested `depth` objects deep, as text (JSON.stringify would overflow the stack here). */
const deepSchema = (depth: number) => '{"type":"object","properties":{"a":'.repeat(depth) + '{"type":"string"}' + '}}'.repeat(depth);

let engine: ChatEngine;
let serve: RunningServer;
let backend: RunningBackendServer;
let root: string;

beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'mcprl-request-bounds-'));
  engine = await ChatEngine.load(TINY, { threads: 1 });
  // A cap above the tiny model's own (1.4 MB), as a model of a longer context has: room for a million numbers.
  serve = await startServer(engine, { port: 0, maxBodyBytes: 8 << 20 });
  backend = await startBackendServer({ dir: path.join(root, 'store'), port: 0 });
}, 60_000);
afterAll(async () => {
  await backend?.close();
  await serve?.close();
  engine?.close();
  await rm(root, { recursive: true, force: true });
});

const postText = async (url: string, body: string) => {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: r.status, error: ((await r.json()) as { error: { message: string; param?: string | null; field?: string | null; code: string } }).error };
};
const health = async (base: string) => (await fetch(`${base}/health`)).status;
const serveBase = () => serve.url.replace(/\/v1$/, '');

describe('mcprl serve', () => {
  it('a tool schema nested 20,000 deep is 400 naming the field, not 500 "Maximum call stack size exceeded"', async () => {
    const body = `{"model":${JSON.stringify(engine.modelName)},"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"tools":[{"type":"function","function":{"name":"f","parameters":${deepSchema(20_000)}}}]}`;
    const r = await postText(`${serve.url}/chat/completions`, body);
    expect(r.status).toBe(400);
    expect(r.error.param).toMatch(/^tools\.0\.function\.parameters\.properties\.a\./);
    expect(r.error.message).toMatch(/nested deeper than 64 levels/);
    expect(await health(serveBase())).toBe(200);
    fault('tool schema nested 20,000 deep to `mcprl serve`', '400 naming the field, before JSON.parse', `${r.status} ${r.error.code} param ${r.error.param?.slice(0, 40)}…`);
  });

  it('a million numbers as `messages` (under the caps) are one 400 naming messages.0, not an issue per element', async () => {
    const n = 1_000_000;
    const body = `{"model":${JSON.stringify(engine.modelName)},"messages":${numbers(n)}}`;
    // What validation built: the issues of each parse of the request (the server runs in this process).
    const parse = vi.spyOn(chatRequestSchema, 'safeParse');
    let issues: number[];
    let r: Awaited<ReturnType<typeof postText>>;
    try {
      r = await postText(`${serve.url}/chat/completions`, body);
      issues = parse.mock.results.map((x) => (x.value as { success: boolean; error?: { issues: unknown[] } }).error?.issues.length ?? 0);
    } finally {
      parse.mockRestore();
    }
    expect(r.status).toBe(400);
    expect(r.error.param).toBe('messages.0');
    expect(issues).toEqual([1]);
    expect(await health(serveBase())).toBe(200);
    fault('1M numbers as `messages` to `mcprl serve`', '400 at the first bad element (validation stops there)', `${r.status} param ${r.error.param}; ${issues[0]} issue built`);
  });
});

describe('mcprl backend', () => {
  it('/backend/train with an array of 1,100,000 numbers is refused by its length before JSON.parse, naming the field', async () => {
    const body = `{"model":{"project":"p","name":"n"},"groups":${numbers(1_100_000)}}`;
    const r = await postText(`${backend.url}/backend/train`, body);
    expect(r.status).toBe(400);
    expect(r.error.field).toBe('groups');
    expect(r.error.message).toMatch(/more than 1048576 elements/);
    expect(await health(backend.url)).toBe(200);
    fault('1.1M numbers as `groups` to `mcprl backend` /backend/train', '400 by the array-length bound, before JSON.parse', `${r.status} field ${r.error.field}`);
  });

  it('bad elements under the length bound are one issue: 400 naming the first, not 500', async () => {
    // Registered, so that the groups reach the library's own schemas.
    const reg = await fetch(`${backend.url}/backend/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ settings: { project: 'p', name: 'n', baseModel: TINY } }),
    });
    expect(reg.status).toBe(200);
    // An assistant turn's sampled ids, a million strings: the first is the one issue.
    const ids = `[${'"x",'.repeat(999_999)}"x"]`;
    const turn = `{"role":"assistant","content":"a","mcprl":{"token_ids":${ids},"logprobs":[]}}`;
    const body = `{"model":{"project":"p","name":"n"},"groups":[{"trajectories":[{"messages":[{"role":"user","content":"hi"},${turn}],"reward":1}]}]}`;
    const r = await postText(`${backend.url}/backend/train`, body);
    expect(r.status).toBe(400);
    expect(r.error.field).toBe('groups.0.trajectories.0.messages.1.mcprl.token_ids.0');
    const groups = await postText(`${backend.url}/backend/train`, `{"model":{"project":"p","name":"n"},"groups":${numbers(1_000_000)}}`);
    expect(groups.status).toBe(400);
    expect(groups.error.field).toBe('groups.0');
    expect(await health(backend.url)).toBe(200);
    fault('1M invalid elements to /backend/train (groups; a turn\'s token ids)', '400 naming the first (validation stops there)', `${groups.status} ${groups.error.field}; ${r.status} ${r.error.field}`);
  }, 60_000);

  it('register with a base model folder that is not there, or a rank past the trainer\'s, is 400 naming the field, not 500', async () => {
    const model = { project: 'p', name: 'm2' };
    const missing = await postText(`${backend.url}/backend/register`, JSON.stringify({ settings: { ...model, baseModel: path.join(root, 'no-such-model') } }));
    expect(missing.status).toBe(400);
    expect(missing.error.field).toBe('settings.baseModel');
    const rank = await postText(`${backend.url}/backend/register`, JSON.stringify({ settings: { ...model, baseModel: TINY, lora: { rank: 1e9 } } }));
    expect(rank.status).toBe(400);
    expect(rank.error.field).toBe('settings.lora.rank');
    // Neither left anything behind: the same name registers with good settings.
    const ok = await fetch(`${backend.url}/backend/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ settings: { ...model, baseModel: TINY } }) });
    expect(ok.status).toBe(200);
    fault('register with a missing base model folder; LoRA rank 10⁹', '400 naming the field', `${missing.status} ${missing.error.field}; ${rank.status} ${rank.error.field}`);
  });

  it('a body nested 100,000 deep is 400, not a stack overflow', async () => {
    const r = await postText(`${backend.url}/backend/register`, `{"settings":${'['.repeat(100_000)}${']'.repeat(100_000)}}`);
    expect(r.status).toBe(400);
    expect(r.error.field).toBe('settings.0.0.0.0.0.0.0.0.0.0.0.…');
    fault('body nested 100,000 deep to `mcprl backend`', '400 naming the field', `${r.status} field ${r.error.field}`);
  });
});
