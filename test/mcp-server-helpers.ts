/**
 * Shared pieces of the `mcprl mcp` tests: starting the server (stdio or HTTP) as a real child process and talking
 * to it with the official SDK client.
 */
import { existsSync } from 'node:fs';
import { request } from 'node:http';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT, spawnHttpServer, type RunningHttpServer } from './helpers/servers.js';

export const ENTRY = path.join(REPO_ROOT, 'src', 'cli', 'entry.ts');

/**
 * The bundled tiny model (fixtures/models/tiny-bookshop) and its scenario sets; MCPRL_TEST_TINY_MODEL and
 * MCPRL_TEST_TINY_SCENARIOS point elsewhere (e.g. a model built with scripts/tiny-model/build.ts).
 */
export const TINY_MODEL = process.env.MCPRL_TEST_TINY_MODEL ?? path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
export const TINY_SCENARIOS = process.env.MCPRL_TEST_TINY_SCENARIOS ?? path.join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop');
export const haveTinyModel = existsSync(path.join(TINY_MODEL, 'config.json'));

/** The fixture bookshop as a tool argument (stdio; the mcprl server's cwd is the repository root). */
export const FIXTURE_TARGET = { command: process.execPath, args: ['--import', 'tsx', FIXTURE_SERVER_MAIN] };

/** The arguments of `mcprl mcp` run from source. */
export function mcpArgs(extra: string[]): string[] {
  return ['--import', 'tsx', ENTRY, 'mcp', ...extra];
}

export async function stdioClient(extra: string[], env: Record<string, string> = {}): Promise<{ client: Client; stderr: () => string }> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: mcpArgs(extra),
    cwd: REPO_ROOT,
    env: { ...(process.env as Record<string, string>), ...env },
    stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const client = new Client({ name: 'mcprl-test', version: '0' });
  await client.connect(transport);
  return { client, stderr: () => err };
}

export async function startMcprlHttp(extra: string[], env: Record<string, string> = {}): Promise<RunningHttpServer> {
  return spawnHttpServer({
    command: process.execPath,
    args: mcpArgs(['--http', '0', ...extra]),
    env,
    ready: /listening on http:\/\/127\.0\.0\.1:(\d+)\/mcp/,
    timeoutMs: 30_000,
  });
}

export async function httpClient(url: string, token?: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(url), token ? { requestInit: { headers: { Authorization: `Bearer ${token}` } } } : undefined);
  const client = new Client({ name: 'mcprl-test-http', version: '0' });
  await client.connect(transport);
  return client;
}

/** Calls a tool and returns its result, typed loosely for assertions. */
export async function call(client: Client, name: string, args: Record<string, unknown>, opts: Parameters<Client['callTool']>[2] = {}) {
  const r = (await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000, ...opts })) as CallToolResult;
  const text = r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
  return { result: r, isError: r.isError === true, text, data: (r.structuredContent ?? {}) as Record<string, any> };
}

/** A raw HTTP POST of an initialize request, with the given headers; resolves with the status code. */
export function rawInitialize(url: string, headers: Record<string, string>): Promise<number> {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } } });
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end(body);
  });
}
