/**
 * The transports of `mcprl mcp`: stdio, or streamable HTTP. Over HTTP every session gets its own McpServer over the
 * one shared context (workspace, runs, loaded engine), as the fixture server does.
 *
 * HTTP is the MCP SDK's own Express app (`createMcpExpressApp`) with its bearer-auth middleware, behind the guard
 * all of mcprl's local servers share (src/util/http-guard.ts): the Host header must name an allowed host, so a web
 * page cannot reach a local server through DNS rebinding; a browser's Origin must be this very server (scheme, host
 * and port) or one the operator allowed; a body must be application/json. The server binds 127.0.0.1 unless told
 * otherwise; any address that is not loopback requires a bearer token, which is then checked on every request
 * (also on loopback when one is given).
 */
import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import type { OAuthTokenVerifier } from '@modelcontextprotocol/sdk/server/auth/provider.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { checkBind, checkToken, createHttpGuard } from '../util/http-guard.js';
import { listenHttp } from '../util/http-listen.js';
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
  /** Bearer token; required when host is not a loopback address. Empty or containing whitespace is refused. */
  token?: string;
  /** Host names (without port) the Host header may carry, besides the bound host and the loopback names. */
  allowedHosts?: string[];
  /** Origins (scheme://host[:port]) a browser page may call from, besides this server's own. Default none. */
  allowedOrigins?: string[];
}

function jsonRpcError(res: Response, status: number, message: string, code = -32000): void {
  res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
}

/** The operator's one bearer token, compared in constant time. */
function staticTokenVerifier(token: string): OAuthTokenVerifier {
  const expected = createHash('sha256').update(token).digest();
  return {
    async verifyAccessToken(given: string) {
      // Hash both sides so that the comparison takes the same time whatever the lengths.
      if (!timingSafeEqual(createHash('sha256').update(given).digest(), expected)) throw new InvalidTokenError('a valid bearer token is required');
      // The SDK's middleware wants an expiry; the operator's token is valid for as long as the server runs.
      return { token: given, clientId: 'mcprl-operator', scopes: [], expiresAt: Math.floor(Date.now() / 1000) + 3600 };
    },
  };
}

/** Starts the HTTP server; resolves with it and its URL once it listens. */
export async function serveHttp(ctx: McprlServerContext, opts: HttpOptions): Promise<{ server: Server; url: string; close: () => Promise<void> }> {
  const host = opts.host ?? '127.0.0.1';
  const token = opts.token === undefined ? undefined : checkToken(opts.token);
  await checkBind(host, token, 'mcprl mcp', '--token (or --token-env)');
  // The local servers' guard (Host, Origin, JSON bodies) answers before Express reads a byte of the body. The token
  // is the SDK's bearer middleware's, for its WWW-Authenticate answers.
  const guard = createHttpGuard({ host, ...(opts.allowedHosts ? { allowedHosts: opts.allowedHosts } : {}), ...(opts.allowedOrigins ? { allowedOrigins: opts.allowedOrigins } : {}) });
  const app = createMcpExpressApp({ host, allowedHosts: guard.hosts });
  if (token) app.use(requireBearerAuth({ verifier: staticTokenVerifier(token) }));

  // The SDK (1.32) has no session store of its own: this map is the one its examples keep, id → transport.
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  app.all('/mcp', async (req: Request, res: Response) => {
    const sessionId = req.headers['mcp-session-id'];
    if (typeof sessionId === 'string') {
      const transport = sessions.get(sessionId);
      if (!transport) return jsonRpcError(res, 404, 'Session not found');
      return transport.handleRequest(req, res, req.body);
    }
    if (req.method !== 'POST' || !isInitializeRequest(req.body)) {
      return jsonRpcError(res, 400, 'Bad Request: no session id and not an initialize request');
    }
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => void sessions.set(id, transport),
      onsessionclosed: (id) => void sessions.delete(id),
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await createMcprlServer(ctx).connect(transport);
    await transport.handleRequest(req, res, req.body);
  });
  app.use((_req: Request, res: Response) => jsonRpcError(res, 404, 'Not found: the MCP endpoint is /mcp'));
  // Express's own error page is HTML with a stack trace; clients get JSON-RPC errors instead.
  app.use((err: { status?: number; type?: string; message?: string }, _req: Request, res: Response, _next: NextFunction) => {
    if (res.headersSent) return void res.end();
    if (err.type === 'entity.parse.failed') return jsonRpcError(res, 400, 'Parse error: the body is not JSON', -32700);
    const status = err.status ?? 500;
    jsonRpcError(res, status, status === 500 ? `Internal error: ${err.message ?? String(err)}` : (err.message ?? 'Bad request'));
  });

  const http = createServer((req, res) => {
    const refused = guard.check(req);
    if (!refused) return void app(req, res);
    res.writeHead(refused.status, { 'content-type': 'application/json', connection: 'close' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: refused.message }, id: null }));
  });
  const listening = await listenHttp(http, opts.port, host);
  const close = async () => {
    for (const t of sessions.values()) await t.close().catch(() => undefined);
    await listening.close();
    ctx.engines.close();
  };
  return { server: http, url: `${listening.origin}/mcp`, close };
}
