/**
 * A real OAuth-protected MCP server for tests, in-process: an authorization server made of the MCP SDK's own
 * server-side auth (`mcpAuthRouter`: metadata, dynamic client registration, authorize, token with PKCE checks,
 * protected-resource metadata) over an OAuthServerProvider that issues and verifies tokens in memory, and the
 * bookshop fixture server over Streamable HTTP behind the SDK's `requireBearerAuth`. Not a mock: every byte the
 * client sees comes from the SDK's handlers. The authorize step approves at once (there is no user to ask), and
 * the test's hooks can expire tokens and count what the client did.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Response } from 'express';
import type { OAuthRegisteredClientsStore } from '@modelcontextprotocol/sdk/server/auth/clients.js';
import { InvalidGrantError, InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import type { AuthorizationParams, OAuthServerProvider } from '@modelcontextprotocol/sdk/server/auth/provider.js';
import { getOAuthProtectedResourceMetadataUrl, mcpAuthRouter } from '@modelcontextprotocol/sdk/server/auth/router.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { OAuthClientInformationFull, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
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

/** The authorization server's state: codes, access tokens and refresh tokens, all in memory. */
export class MemoryOAuthProvider implements OAuthServerProvider {
  readonly clientsStore = new MemoryClients();
  private readonly codes = new Map<string, { client: OAuthClientInformationFull; params: AuthorizationParams }>();
  private readonly access = new Map<string, Grant & { expiresAt: number }>();
  private readonly refresh = new Map<string, Grant>();
  /** Every token issued, for checking that none appears in the CLI's output. */
  readonly issued: string[] = [];
  /** How many codes were exchanged, and how many refresh grants were honoured. */
  counts = { authorizations: 0, codeExchanges: 0, refreshes: 0 };

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
    if (!grant || grant.expiresAt <= Date.now()) throw new InvalidTokenError('invalid or expired token');
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

  /** Forgets every refresh token, as an authorization server does when a login is revoked. */
  revokeRefreshTokens(): void {
    this.refresh.clear();
  }
}

export interface OAuthMcpServer {
  /** The MCP endpoint (it answers 401 without a valid bearer token). */
  url: string;
  provider: MemoryOAuthProvider;
  close(): Promise<void>;
}

/** Starts the authorization server and the protected bookshop MCP server on one free port of 127.0.0.1. */
export async function startOAuthMcpServer(): Promise<OAuthMcpServer> {
  const app = express();
  const http: Server = createServer(app);
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', () => resolve());
  });
  const origin = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  const mcpUrl = new URL('/mcp', origin);
  const provider = new MemoryOAuthProvider(mcpUrl.href);
  app.use(mcpAuthRouter({ provider, issuerUrl: new URL(origin), resourceServerUrl: mcpUrl, scopesSupported: ['bookshop'] }));
  const state = new BookshopState();
  app.post(
    '/mcp',
    requireBearerAuth({ verifier: provider, resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(mcpUrl) }),
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
  app.all('/mcp', requireBearerAuth({ verifier: provider, resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(mcpUrl) }), (_req, res) => {
    res.status(405).set('allow', 'POST').end();
  });
  return {
    url: mcpUrl.href,
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
