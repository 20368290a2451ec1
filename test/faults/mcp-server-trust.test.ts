/**
 * `mcprl mcp` and what it trusts its clients with: environment variables sent as LLM API keys (only those the
 * operator granted, only where granted — a local stub stands in for the remote LLM API and records what reaches
 * it), secrets of targets in error text (redacted, while the useful stderr lines stay), commands run for HTTP
 * clients (off unless --allow-commands), blank bearer tokens, the Origin check's port, and machine paths in the
 * config.json resource.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_SERVER_MAIN, REPO_ROOT, type RunningHttpServer } from '../helpers/servers.js';
import { call, FIXTURE_TARGET, httpClient, mcpArgs, rawInitialize, startMcprlHttp, stdioClient } from '../mcp-server-helpers.js';
import { fault } from './fault-table.js';

const base = realpathSync(mkdtempSync(path.join(tmpdir(), 'mcprl-mcp-trust-')));
const ws = path.join(base, 'ws');

const SERVER_TOKEN = 'server-token-5f1c9a';
const OPENAI_KEY = 'sk-openai-test-77aa';
const GRANTED_KEY = 'granted-key-31bb';

/** A stand-in for a remote OpenAI-compatible API: records each request's path and Authorization, answers 401. */
interface LlmStub {
  url: string;
  seen: { path: string; authorization: string }[];
  close(): Promise<void>;
}

async function startLlmStub(): Promise<LlmStub> {
  const seen: LlmStub['seen'] = [];
  const server: Server = createServer((req: IncomingMessage, res) => {
    seen.push({ path: req.url ?? '', authorization: req.headers.authorization ?? '' });
    req.resume();
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: 'invalid api key', type: 'invalid_request_error' } }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, seen, close: () => new Promise((r) => server.close(() => r())) };
}

beforeAll(() => {
  mkdirSync(path.join(ws, 'fake-model'), { recursive: true });
  writeFileSync(path.join(ws, 'fake-model', 'config.json'), '{}');
  mkdirSync(path.join(ws, 'scenarios', 'set'), { recursive: true });
  const line = (id: string, task: string) => JSON.stringify({ id, task, difficulty: 1, source: 'schema' }) + '\n';
  writeFileSync(path.join(ws, 'scenarios', 'set', 'train.jsonl'), line('t1', 'Find book bk-001.'));
  writeFileSync(path.join(ws, 'scenarios', 'set', 'val.jsonl'), line('v1', 'Find book bk-002.'));
});

afterAll(() => rmSync(base, { recursive: true, force: true }));

describe('mcprl mcp: LLM API keys only from granted variables, only to granted base URLs', () => {
  let client: Client;
  let stub: LlmStub;
  beforeAll(async () => {
    stub = await startLlmStub();
    const env = { MCPRL_TOKEN: SERVER_TOKEN, OPENAI_API_KEY: OPENAI_KEY, GRANTED_KEY, OPENAI_BASE_URL: '' };
    client = (await stdioClient(['--workspace', ws, '--allow-key-env', `GRANTED_KEY=${stub.url}/v1`], env)).client;
  });
  afterAll(async () => {
    await client?.close();
    await stub?.close();
  });

  const generate = (name: string, generator: Record<string, unknown>) =>
    call(client, 'generate_scenarios', { target: FIXTURE_TARGET, name, count: 2, generator: { model: 'm', ...generator } });

  it('refuses a variable the operator did not grant, and sends nothing', async () => {
    const r = await generate('a', { base_url: `${stub.url}/v1`, api_key_env: 'MCPRL_TOKEN' });
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(/api_key_env MCPRL_TOKEN is not allowed.*--allow-key-env MCPRL_TOKEN=/);
    expect(stub.seen).toEqual([]);
    fault('`mcprl mcp`: api_key_env names a variable not granted', 'refused; nothing sent', 'refused before any request');
  });

  it('refuses to send a granted key to another base URL, and sends nothing', async () => {
    const openai = await generate('b', { base_url: `${stub.url}/v1`, api_key_env: 'OPENAI_API_KEY' });
    expect(openai.isError).toBe(true);
    expect(openai.text).toMatch(/OPENAI_API_KEY may be sent only to https:\/\/api\.openai\.com\//);
    const elsewhere = await generate('c', { base_url: `${stub.url}/other`, api_key_env: 'GRANTED_KEY' });
    expect(elsewhere.isError).toBe(true);
    expect(elsewhere.text).toMatch(/GRANTED_KEY may be sent only to/);
    const prefixTrick = await generate('d', { base_url: `${stub.url}/v1evil`, api_key_env: 'GRANTED_KEY' });
    expect(prefixTrick.isError).toBe(true);
    expect(stub.seen).toEqual([]);
    fault('`mcprl mcp`: a granted key to another base_url', 'refused; nothing sent', 'refused; the stub received no request');
  });

  it('without api_key_env, sends no key to a base URL OPENAI_API_KEY is not granted for', async () => {
    const r = await generate('e', { base_url: `${stub.url}/v1` });
    expect(r.isError).toBe(true); // the stub answers 401
    expect(stub.seen.length).toBeGreaterThan(0);
    for (const s of stub.seen) expect(s.authorization).not.toContain(OPENAI_KEY);
    expect(JSON.stringify(stub.seen)).not.toContain(SERVER_TOKEN);
    stub.seen.length = 0;
    fault('`mcprl mcp`: OPENAI_API_KEY to an ungranted base_url', 'no key sent', 'no request carried the key or the server token');
  });

  it('sends a granted key to its granted base URL', async () => {
    const r = await generate('f', { base_url: `${stub.url}/v1`, api_key_env: 'GRANTED_KEY' });
    expect(r.isError).toBe(true); // the stub answers 401
    expect(stub.seen.length).toBeGreaterThan(0);
    expect(stub.seen.every((s) => s.path.startsWith('/v1/') && s.authorization === `Bearer ${GRANTED_KEY}`)).toBe(true);
    stub.seen.length = 0;
    fault('`mcprl mcp`: a granted key to its granted base_url', 'sent', 'Authorization carried the key');
  });

  it("refuses a judge key the operator did not grant before any run starts", async () => {
    const r = await call(client, 'start_training', {
      target: FIXTURE_TARGET, model: 'fake-model', run: 'judged', scenarios: 'scenarios/set', reward: 'ruler',
      judge: { base_url: `${stub.url}/v1`, model: 'j', api_key_env: 'MCPRL_TOKEN' },
    });
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(/judge\.api_key_env MCPRL_TOKEN is not allowed/);
    expect(existsSync(path.join(ws, 'judged'))).toBe(false);
    fault('`mcprl mcp`: start_training with an ungranted judge key', 'refused before any run starts', 'refused; no run folder');
  });
});

describe('mcprl mcp: secrets of targets never reach error text; the cause does', () => {
  let client: Client;
  beforeAll(async () => {
    client = (await stdioClient(['--workspace', ws])).client;
  });
  afterAll(async () => client?.close());

  it("keeps the last lines of a dying server's stderr, with its environment's values redacted", async () => {
    const script = 'console.error("loading settings"); throw new Error("cannot log in with " + process.env.SERVICE_PASSWORD)';
    const r = await call(client, 'inspect_server', { target: { command: process.execPath, args: ['-e', script], env: { SERVICE_PASSWORD: 'pw-secret-8812' } } });
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(/^SERVER_EXITED: .*exited during initialize: .*Error: cannot log in with \[redacted\]/);
    expect(r.text).not.toContain('pw-secret-8812');
    expect(r.text).not.toMatch(/Node\.js v\d/);
    fault('target dies with secrets in its stderr', 'last lines kept, env values redacted', 'cause kept; values shown as [redacted]');
  });

  it('redacts header values an HTTP target echoes in its error body', async () => {
    // A broken server that quotes the request's headers back in a 500 (as some debug pages do).
    const echo = createServer((req, res) => {
      req.resume();
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(`internal error; request headers: ${JSON.stringify(req.headers)}`);
    });
    await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', () => resolve()));
    try {
      const url = `http://127.0.0.1:${(echo.address() as AddressInfo).port}/mcp`;
      const r = await call(client, 'inspect_server', { target: { url, headers: { Authorization: 'Bearer hdr-secret-5521', 'X-Api-Key': 'xkey-secret-9043' } } });
      expect(r.isError).toBe(true);
      expect(r.text).toMatch(/HTTP 500/);
      expect(r.text).toContain('[redacted]');
      expect(r.text).not.toContain('hdr-secret-5521');
      expect(r.text).not.toContain('xkey-secret-9043');
    } finally {
      await new Promise<void>((r) => echo.close(() => r()));
    }
    fault('HTTP target echoes its headers in an error', 'header values redacted', 'no header value in the message');
  });

  it('shows config.json with paths relative to the workspace, never absolute machine paths', async () => {
    mkdirSync(path.join(ws, 'cfgrun'), { recursive: true });
    const config = { model: path.join(ws, 'fake-model'), target: `${process.execPath} --import tsx ${FIXTURE_SERVER_MAIN}`, reward: 'checks', judge: { baseURL: 'http://127.0.0.1:9/v1', model: 'j' } };
    writeFileSync(path.join(ws, 'cfgrun', 'config.json'), JSON.stringify(config));
    const res = await client.readResource({ uri: 'mcprl://runs/cfgrun/config.json' });
    const text = (res.contents[0] as { text: string }).text;
    expect(text).not.toContain(base);
    expect(text).not.toContain(REPO_ROOT);
    expect(JSON.parse(text)).toEqual({ ...config, model: 'fake-model', target: `${path.basename(process.execPath)} --import tsx main.ts` });
    fault('config.json resource of a run', 'workspace-relative paths', 'no absolute machine path');
  });
});

/** Runs `mcprl mcp` until it exits or starts listening (then stops it); resolves with what it said. */
function runMcp(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; listening: boolean; stderr: string }> {
  const child = spawn(process.execPath, mcpArgs(args), { cwd: REPO_ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  let listening = false;
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
    if (!listening && /listening on/.test(stderr)) {
      listening = true;
      child.kill('SIGTERM');
    }
  });
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, listening, stderr })));
}

describe('mcprl mcp over HTTP: what a remote client may do', () => {
  const TOKEN = 'http-token-0c4e';
  let srv: RunningHttpServer;
  let client: Client;
  beforeAll(async () => {
    srv = await startMcprlHttp(['--workspace', ws, '--token-env', 'MCPRL_T', '--allowed-origin', 'http://localhost:6274'], { MCPRL_T: TOKEN });
    client = await httpClient(srv.url, TOKEN);
  });
  afterAll(async () => {
    await client?.close();
    await srv?.stop();
  });

  it('runs no commands for its clients unless the operator allows it', async () => {
    const r = await call(client, 'inspect_server', { target: FIXTURE_TARGET });
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(/does not run commands.*--allow-commands/);
    const permissive = await startMcprlHttp(['--workspace', ws, '--token-env', 'MCPRL_T', '--allow-commands'], { MCPRL_T: TOKEN });
    try {
      const c = await httpClient(permissive.url, TOKEN);
      try {
        const ok = await call(c, 'inspect_server', { target: FIXTURE_TARGET });
        expect(ok.isError, ok.text).toBe(false);
      } finally {
        await c.close();
      }
    } finally {
      await permissive.stop();
    }
    fault('stdio target from an HTTP client of `mcprl mcp`', 'refused unless the operator gives --allow-commands', 'refused; runs with --allow-commands');
  }, 120_000); // a second server start

  it('compares the Origin port too: a page on another local port is refused', async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const host = `localhost:${srv.port}`;
    expect(await rawInitialize(srv.url, { ...auth, host, origin: `http://localhost:${srv.port + 1}` })).toBe(403);
    expect(await rawInitialize(srv.url, { ...auth, host, origin: `https://localhost:${srv.port}` })).toBe(403);
    expect(await rawInitialize(srv.url, { ...auth, host, origin: `http://localhost:${srv.port}` })).toBe(200);
    // The one origin the operator allowed.
    expect(await rawInitialize(srv.url, { ...auth, host, origin: 'http://localhost:6274' })).toBe(200);
    fault('Origin on another local port', '403', '403; own port 200');
  });

  it('refuses a blank or whitespace-only bearer token', async () => {
    for (const [args, env] of [
      [['--token', '   '], {}],
      [['--token', ''], {}],
      [['--token-env', 'BLANK_T'], { BLANK_T: ' \t ' }],
    ] as [string[], Record<string, string>][]) {
      const r = await runMcp(['--workspace', ws, '--http', '0', ...args], env);
      expect(r.listening, `${args.join(' ')}: ${r.stderr}`).toBe(false);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/empty or only whitespace|empty or unset/);
    }
    fault("`mcprl mcp --http` with a blank or whitespace-only token", 'refused at start', 'exit 1 for --token "   ", --token "", a blank --token-env');
  }, 180_000); // three server starts in a row
});
