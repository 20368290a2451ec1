/**
 * A real OAuth-protected MCP server for tests, in-process: an authorization server made of the MCP SDK's own
 * server-side auth (`mcpAuthRouter`: metadata, dynamic client registration, authorize, token with PKCE checks,
 * protected-resource metadata) over an OAuthServerProvider that issues and verifies tokens in memory, and the
 * bookshop fixture server over Streamable HTTP behind the SDK's `requireBearerAuth`. Not a mock: every byte the
 * client sees comes from the SDK's handlers, token revocation (RFC 7009) included. The authorize step approves at
 * once (there is no user to ask), and the test's hooks can expire tokens, hold refresh requests at a gate (so that
 * two processes can be made to race), make revocation fail, and count what the client did. The bookshop is served
 * over the older HTTP+SSE transport too, behind the same bearer auth.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { OAuthRegisteredClientsStore } from '@modelcontextprotocol/sdk/server/auth/clients.js';
import { InvalidGrantError, InvalidTokenError, ServerError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import type { AuthorizationParams, OAuthServerProvider } from '@modelcontextprotocol/sdk/server/auth/provider.js';
import { getOAuthProtectedResourceMetadataUrl, mcpAuthRouter } from '@modelcontextprotocol/sdk/server/auth/router.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { OAuthClientInformationFull, OAuthTokenRevocationRequest, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { BookshopState, createBookshopServer } from '../../fixtures/server/bookshop.js';

/** Lifetime of an issued access token, in seconds (the tests expire tokens explicitly, never by waiting). */
const ACCESS_TOKEN_SECONDS = 3600;

interface Grant {
  clientId: string;
  scopes: string[];
  resource?: string;
}

class MemoryClients implements OAuthRegisteredClientsStore {
  readonly clients = new Map<string, OAuthClientInformationFull>();
  getClient(id: string): OAuthClientInformationFull | undefined {
    return this.clients.get(id);
  }
  registerClient(client: OAuthClientInformationFull): OAuthClientInformationFull {
    this.clients.set(client.client_id, client);
    return client;
  }
}

/** Holds refresh requests until released; `arrived(n)` resolves once n requests have come to it. */
export class RefreshGate {
  private count = 0;
  private readonly waiters: { n: number; resolve: () => void }[] = [];
  private open!: () => void;
  readonly opened = new Promise<void>((resolve) => (this.open = resolve));

  /** Called by the token endpoint for each refresh request, before it is served. */
  async pass(): Promise<void> {
    this.count++;
    for (const w of this.waiters.filter((x) => x.n <= this.count)) {
      this.waiters.splice(this.waiters.indexOf(w), 1);
      w.resolve();
    }
    await this.opened;
  }

  arrived(n: number): Promise<void> {
    return new Promise((resolve) => (this.count >= n ? resolve() : this.waiters.push({ n, resolve })));
  }

  release(): void {
    this.open();
  }
}

/** The authorization server's state: codes, access tokens and refresh tokens, all in memory. */
export class MemoryOAuthProvider implements OAuthServerProvider {
  readonly clientsStore = new MemoryClients();
  private readonly codes = new Map<string, { client: OAuthClientInformationFull; params: AuthorizationParams }>();
  private readonly access = new Map<string, Grant & { expiresAt: number }>();
  private readonly refresh = new Map<string, Grant>();
  /** Every token issued, for checking that none appears in the CLI's output. */
  readonly issued: string[] = [];
  /**
   * How many codes were exchanged, refresh requests reached the token endpoint's grant, refresh grants were honoured,
   * requests to the MCP endpoints were answered 401, and tokens were revoked (by type hint, in order).
   */
  counts = { authorizations: 0, codeExchanges: 0, refreshRequests: 0, refreshes: 0, unauthorized: 0, revocations: [] as string[] };
  /** Where refresh requests wait while set (holdRefreshes). */
  private gate: RefreshGate | undefined;
  /** While set, the revocation endpoint answers 500 server_error. */
  failRevocation = false;
  /** While set, no access token is accepted, fresh ones included (a resource server that refuses the client). */
  refuseAccessTokens = false;

  constructor(private readonly expectedResource: string) {}

  async authorize(client: OAuthClientInformationFull, params: AuthorizationParams, res: Response): Promise<void> {
    this.counts.authorizations++;
    const code = randomBytes(16).toString('hex');
    this.codes.set(code, { client, params });
    const target = new URL(params.redirectUri);
    target.searchParams.set('code', code);
    if (params.state !== undefined) target.searchParams.set('state', params.state);
    res.redirect(302, target.href);
  }

  async challengeForAuthorizationCode(_client: OAuthClientInformationFull, code: string): Promise<string> {
    const entry = this.codes.get(code);
    if (!entry) throw new InvalidGrantError('unknown authorization code');
    return entry.params.codeChallenge;
  }

  async exchangeAuthorizationCode(client: OAuthClientInformationFull, code: string, _verifier?: string, _redirectUri?: string, resource?: URL): Promise<OAuthTokens> {
    const entry = this.codes.get(code);
    if (!entry || entry.client.client_id !== client.client_id) throw new InvalidGrantError('unknown authorization code');
    // RFC 8707: the client must name the MCP server it wants the token for.
    if (resource?.href !== this.expectedResource) throw new InvalidGrantError(`wrong resource: ${String(resource)}`);
    this.codes.delete(code);
    this.counts.codeExchanges++;
    return this.issue({ clientId: client.client_id, scopes: entry.params.scopes ?? [], resource: resource.href });
  }

  async exchangeRefreshToken(client: OAuthClientInformationFull, refreshToken: string, _scopes?: string[], resource?: URL): Promise<OAuthTokens> {
    this.counts.refreshRequests++;
    await this.gate?.pass();
    const grant = this.refresh.get(refreshToken);
    if (!grant || grant.clientId !== client.client_id) throw new InvalidGrantError('unknown refresh token');
    if (resource && resource.href !== this.expectedResource) throw new InvalidGrantError(`wrong resource: ${resource.href}`);
    // Rotation, as OAuth 2.1 asks of public clients: the old refresh token is spent.
    this.refresh.delete(refreshToken);
    this.counts.refreshes++;
    return this.issue(grant);
  }

  async verifyAccessToken(token: string): Promise<AuthInfo> {
    const grant = this.access.get(token);
    if (this.refuseAccessTokens || !grant || grant.expiresAt <= Date.now()) throw new InvalidTokenError('invalid or expired token');
    return { token, clientId: grant.clientId, scopes: grant.scopes, expiresAt: Math.floor(grant.expiresAt / 1000), resource: grant.resource ? new URL(grant.resource) : undefined };
  }

  private issue(grant: Grant): OAuthTokens {
    const accessToken = `at-${randomBytes(16).toString('hex')}`;
    const refreshToken = `rt-${randomBytes(16).toString('hex')}`;
    this.access.set(accessToken, { ...grant, expiresAt: Date.now() + ACCESS_TOKEN_SECONDS * 1000 });
    this.refresh.set(refreshToken, grant);
    this.issued.push(accessToken, refreshToken);
    return { access_token: accessToken, token_type: 'Bearer', expires_in: ACCESS_TOKEN_SECONDS, refresh_token: refreshToken, scope: grant.scopes.join(' ') };
  }

  /** Makes every access token issued so far expired, as the passing of its lifetime would. */
  expireAccessTokens(): void {
    for (const grant of this.access.values()) grant.expiresAt = 0;
  }

  /**
   * RFC 7009 revocation, served by the SDK's revocation handler (which authenticates the client first). An own
   * property, so that a server without revocation can be made by deleting it before the router is built.
   */
  revokeToken?: (client: OAuthClientInformationFull, request: OAuthTokenRevocationRequest) => Promise<void> = async (client, request) => {
    if (this.failRevocation) throw new ServerError('revocation is out of order');
    // A token of another client, or an unknown one, is no error (RFC 7009 §2.2).
    if (this.access.get(request.token)?.clientId === client.client_id) this.access.delete(request.token);
    if (this.refresh.get(request.token)?.clientId === client.client_id) this.refresh.delete(request.token);
    this.counts.revocations.push(request.token_type_hint ?? 'none');
  };

  /** Holds every refresh request from now on until the gate returned is released. */
  holdRefreshes(): RefreshGate {
    const gate = new RefreshGate();
    this.gate = gate;
    void gate.opened.then(() => {
      if (this.gate === gate) this.gate = undefined;
    });
    return gate;
  }

  /** Whether `token` is a live access token (not expired, not revoked). */
  accessTokenValid(token: string): boolean {
    return (this.access.get(token)?.expiresAt ?? 0) > Date.now();
  }

  /** Forgets every refresh token, as an authorization server does when a login is revoked. */
  revokeRefreshTokens(): void {
    this.refresh.clear();
  }
}

export interface OAuthMcpServer {
  /** The MCP endpoint (it answers 401 without a valid bearer token). */
  url: string;
  /** The same server over the older HTTP+SSE transport (GET for the stream; the streamable HTTP POST gets 404). */
  sseUrl: string;
  provider: MemoryOAuthProvider;
  close(): Promise<void>;
}

export interface OAuthMcpServerOptions {
  /** Whether the authorization server offers token revocation (a revocation_endpoint in its metadata). Default true. */
  revocation?: boolean;
}

/** Starts the authorization server and the protected bookshop MCP server on one free port of 127.0.0.1. */
export async function startOAuthMcpServer(opts: OAuthMcpServerOptions = {}): Promise<OAuthMcpServer> {
  const app = express();
  const http: Server = createServer(app);
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', () => resolve());
  });
  const origin = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  const mcpUrl = new URL('/mcp', origin);
  const provider = new MemoryOAuthProvider(mcpUrl.href);
  if (opts.revocation === false) delete provider.revokeToken;
  app.use(mcpAuthRouter({ provider, issuerUrl: new URL(origin), resourceServerUrl: mcpUrl, scopesSupported: ['bookshop'] }));
  const state = new BookshopState();
  const countUnauthorized = (_req: Request, res: Response, next: NextFunction) => {
    res.on('finish', () => {
      if (res.statusCode === 401) provider.counts.unauthorized++;
    });
    next();
  };
  const bearer = requireBearerAuth({ verifier: provider, resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(mcpUrl) });
  app.use(['/mcp', '/sse', '/messages'], countUnauthorized);
  app.post(
    '/mcp',
    bearer,
    express.json(),
    async (req, res) => {
      // Stateless: a fresh server and transport per request, so no session outlives a token.
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on('close', () => void transport.close());
      await createBookshopServer(state).connect(transport);
      await transport.handleRequest(req, res, req.body);
    },
  );
  // GET (the server-to-client stream) and DELETE need a session; this stateless server has none.
  app.all('/mcp', bearer, (_req, res) => {
    res.status(405).set('allow', 'POST').end();
  });
  // HTTP+SSE: one stream per client, its messages posted to /messages?sessionId=….
  const sse = new Map<string, SSEServerTransport>();
  app.get('/sse', bearer, async (_req, res) => {
    const transport = new SSEServerTransport('/messages', res);
    sse.set(transport.sessionId, transport);
    res.on('close', () => sse.delete(transport.sessionId));
    await createBookshopServer(state).connect(transport);
  });
  app.post('/messages', bearer, express.json(), async (req, res) => {
    const transport = sse.get(String(req.query.sessionId));
    if (!transport) return void res.status(404).end('unknown session');
    await transport.handlePostMessage(req, res, req.body);
  });
  return {
    url: mcpUrl.href,
    sseUrl: new URL('/sse', origin).href,
    provider,
    close: async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

/** A server that answers every request 401 and offers no OAuth metadata (a bearer-token API, say). */
export function startPlain401Server(): Promise<{ url: string; close(): Promise<void> }> {
  return startAnswering((_req, res) => res.writeHead(401, { 'content-type': 'text/plain' }).end('unauthorized'));
}

/** A server that answers every request 500 with the request's Authorization header in the body, as a careless proxy might. */
export function startEchoingServer(): Promise<{ url: string; close(): Promise<void> }> {
  return startAnswering((req, res) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`bad request with ${req.headers.authorization ?? 'no credentials'}`));
}

async function startAnswering(handler: RequestListener): Promise<{ url: string; close(): Promise<void> }> {
  const http = createServer(handler);
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`,
    close: async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
