/**
 * The transports of `mcprl mcp`: stdio, or streamable HTTP. Over HTTP every session gets its own McpServer over the
 * one shared context (workspace, runs, loaded engine), as the fixture server does.
 *
 * HTTP safety: the server binds 127.0.0.1 unless told otherwise; any other address requires a bearer token, which
 * is then checked on every request (also on loopback when one is given). The Host header (and Origin, when a
 * browser sends one) must name an allowed host, so a web page cannot reach a local server through DNS rebinding.
 */
import { randomUUID, timingSafeEqual, createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { createMcprlServer, type McprlServerContext } from './server.js';

export async function serveStdio(ctx: McprlServerContext): Promise<void> {
  const server = createMcprlServer(ctx);
  await server.connect(new StdioServerTransport());
  // Exit when the client closes our stdin, so no orphan survives its parent (background runs keep going).
  process.stdin.on('end', () => {
    ctx.engines.close();
    process.exit(0);
  });
}

export interface HttpOptions {
  port: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Bearer token; required when host is not a loopback address. */
  token?: string;
  /** Host names (without port) the Host header may carry, besides the bound host and the loopback names. */
  allowedHosts?: string[];
}

export class McpHttpConfigError extends Error {
  readonly code = 'MCP_HTTP_CONFIG';
  constructor(message: string) {
    super(message);
    this.name = 'McpHttpConfigError';
  }
}

const LOOPBACK = ['127.0.0.1', 'localhost', '::1', '[::1]'];

export function isLoopback(host: string): boolean {
  return LOOPBACK.includes(host) || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** The hostname of a Host header value (port dropped; IPv6 keeps its brackets). */
function hostnameOf(hostHeader: string): string {
  const h = hostHeader.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(0, h.indexOf(']') + 1);
  return h.split(':')[0];
}

function jsonRpcError(res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > limit) throw Object.assign(new Error('request body too large'), { status: 413 });
    chunks.push(c as Buffer);
  }
  const body = Buffer.concat(chunks).toString('utf8');
  if (!body) return undefined;
  try {
    return JSON.parse(body);
  } catch {
    throw Object.assign(new Error('Parse error: the body is not JSON'), { status: 400 });
  }
}

/** Constant-time comparison of the Authorization header with the expected bearer token. */
function tokenMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer\s+(.+)$/i.exec(header ?? '');
  if (!m) return false;
  // Hash both sides so that the comparison takes the same time whatever the lengths.
  const a = createHash('sha256').update(m[1].trim()).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b);
}

/** Starts the HTTP server; resolves with it and its URL once it listens. */
export async function serveHttp(ctx: McprlServerContext, opts: HttpOptions): Promise<{ server: Server; url: string; close: () => Promise<void> }> {
  const host = opts.host ?? '127.0.0.1';
  if (!isLoopback(host) && !opts.token) {
    throw new McpHttpConfigError(`binding ${host} exposes mcprl beyond this machine: give --token (or --token-env) so every request must carry it`);
  }
  const allowed = new Set([...LOOPBACK, host.toLowerCase(), ...(opts.allowedHosts ?? []).map((h) => h.toLowerCase())]);
  for (const h of [...allowed]) if (h.includes(':') && !h.startsWith('[')) allowed.add(`[${h}]`);
  const sessions = new Map<string, StreamableHTTPServerTransport>();

  const http = createServer((req, res) => {
    void (async () => {
      try {
        const url = new URL(req.url ?? '/', 'http://localhost');
        if (url.pathname !== '/mcp') return jsonRpcError(res, 404, 'Not found: the MCP endpoint is /mcp');
        // DNS rebinding: a page on evil.example that resolves to 127.0.0.1 still sends Host: evil.example.
        const hostHeader = req.headers.host;
        if (!hostHeader || !allowed.has(hostnameOf(hostHeader))) return jsonRpcError(res, 403, `Forbidden: host ${JSON.stringify(hostHeader ?? '')} is not allowed`);
        const origin = req.headers.origin;
        if (origin !== undefined) {
          let originHost = '';
          try {
            originHost = new URL(origin).host;
          } catch {
            /* refused below */
          }
          if (!originHost || !allowed.has(hostnameOf(originHost))) return jsonRpcError(res, 403, `Forbidden: origin ${JSON.stringify(origin)} is not allowed`);
        }
        if (opts.token && !tokenMatches(req.headers.authorization, opts.token)) {
          return jsonRpcError(res, 401, 'Unauthorized: a valid bearer token is required', { 'www-authenticate': 'Bearer' });
        }
        const sessionId = req.headers['mcp-session-id'];
        const body = req.method === 'POST' ? await readJson(req, 4 * 1024 * 1024) : undefined;
        if (typeof sessionId === 'string') {
          const transport = sessions.get(sessionId);
          if (!transport) return jsonRpcError(res, 404, 'Session not found');
          return await transport.handleRequest(req, res, body);
        }
        if (req.method !== 'POST' || !isInitializeRequest(body)) {
          return jsonRpcError(res, 400, 'Bad Request: no session id and not an initialize request');
        }
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => void sessions.set(id, transport),
        });
        transport.onclose = () => {
          if (transport.sessionId) sessions.delete(transport.sessionId);
        };
        await createMcprlServer(ctx).connect(transport);
        await transport.handleRequest(req, res, body);
      } catch (err) {
        const status = (err as { status?: number }).status ?? 500;
        if (!res.headersSent) jsonRpcError(res, status, status === 500 ? `Internal error: ${(err as Error).message}` : (err as Error).message);
        else res.end();
      }
    })();
  });

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(opts.port, host, () => resolve());
  });
  const { port } = http.address() as AddressInfo;
  const shown = host.includes(':') ? `[${host}]` : host;
  const close = async () => {
    for (const t of sessions.values()) await t.close().catch(() => undefined);
    http.closeAllConnections();
    await new Promise<void>((r) => http.close(() => r()));
    ctx.engines.close();
  };
  return { server: http, url: `http://${shown}:${port}/mcp`, close };
}
