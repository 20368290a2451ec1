/**
 * The interactive OAuth 2.1 login behind `mcprl login <url>`, on the MCP SDK's client auth: the server's
 * protected-resource metadata and its authorization server's metadata are discovered, mcprl registers itself
 * dynamically as a public client with a loopback redirect (RFC 8252), the user opens the authorization URL (PKCE,
 * S256, with a state), the code arrives at the loopback listener and is exchanged for tokens, and the login is
 * stored (oauth-store.ts) for every later command.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { auth, extractWWWAuthenticateParams, type OAuthClientProvider, type OAuthDiscoveryState } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { httpFailure } from './connection.js';
import { errorLine } from '../util/errors.js';
import { listenHttp } from '../util/http-listen.js';
import { McpConnectError } from './errors.js';
import { expiryOf, loginSecrets, readLogin, saveLogin, serverKey, withLoginLock } from './oauth-store.js';
import { redact, secretValues } from './redact.js';

/** How long `login` waits for the browser to come back with a code, in ms, unless told otherwise. */
export const DEFAULT_LOGIN_TIMEOUT_MS = 300_000;

/** The path of the loopback listener the authorization server redirects to. */
const CALLBACK_PATH = '/callback';

export interface LoginOptions {
  /** Port of the loopback redirect listener on 127.0.0.1. Default 0: a free port. */
  redirectPort?: number;
  /** Scope to ask for. Default: what the server's 401 or its protected-resource metadata names. */
  scope?: string;
  /** How long to wait for the authorization to come back, in ms. Default DEFAULT_LOGIN_TIMEOUT_MS. */
  timeoutMs?: number;
  /** Receives the flow's progress; `authorize` carries the URL the user must open. */
  onEvent?: (event: LoginEvent) => void;
}

/** What the login flow reports as it goes. */
export type LoginEvent =
  | { event: 'listening'; redirectUrl: string }
  | { event: 'authorize'; url: string }
  | { event: 'authorized'; server: string; file: string };

export interface LoginResult {
  /** The server's canonical URL, the key of its login. */
  server: string;
  /** The file the login was written to. */
  file: string;
}

/** The loopback listener: resolves with the authorization code the browser brings back with the expected state. */
interface CallbackListener {
  redirectUrl: string;
  code: Promise<string>;
  close(): Promise<void>;
}

const PAGE = (text: string) =>
  `<!doctype html><meta charset="utf-8"><title>mcprl login</title><p>${text.replace(/[<>&]/g, (c) => `&#${c.charCodeAt(0)};`)}</p>`;

async function listenForCode(port: number, state: string, timeoutMs: number): Promise<CallbackListener> {
  let resolveCode!: (code: string) => void;
  let rejectCode!: (err: Error) => void;
  const code = new Promise<string>((resolve, reject) => {
    resolveCode = resolve;
    rejectCode = reject;
  });
  code.catch(() => undefined);
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const reply = (status: number, text: string) => {
      res.writeHead(status, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE(text));
    };
    if (url.pathname !== CALLBACK_PATH) return reply(404, 'Not found.');
    // A callback without this login's state is not an answer to it (a stale tab, or a forged request): ignored.
    if (url.searchParams.get('state') !== state) return reply(400, 'This is not the authorization mcprl is waiting for.');
    const error = url.searchParams.get('error');
    if (error) {
      const description = url.searchParams.get('error_description');
      reply(200, `Authorization failed: ${error}. You can close this tab.`);
      return rejectCode(new McpConnectError('AUTH_FAILED', `the authorization server refused: ${error}${description ? `: ${description}` : ''}`));
    }
    const value = url.searchParams.get('code');
    if (!value) return reply(400, 'The redirect carries no code.');
    reply(200, 'mcprl is authorized. You can close this tab.');
    resolveCode(value);
  });
  const listening = await listenHttp(server, port, '127.0.0.1').catch((err: NodeJS.ErrnoException) => {
    throw new McpConnectError('AUTH_FAILED', `cannot listen for the redirect on 127.0.0.1:${port}: ${err.code ?? err.message}`, { cause: err });
  });
  const redirectUrl = `${listening.origin}${CALLBACK_PATH}`;
  const timer = setTimeout(
    () => rejectCode(new McpConnectError('AUTH_FAILED', `no authorization came back to ${redirectUrl} within ${timeoutMs} ms`)),
    timeoutMs,
  );
  return {
    redirectUrl,
    code,
    close: async () => {
      clearTimeout(timer);
      await listening.close();
    },
  };
}

/** The provider of one interactive login: it holds everything in memory until the login is complete. */
class LoginProvider implements OAuthClientProvider {
  private client: OAuthClientInformationMixed | undefined;
  private verifier: string | undefined;
  received: OAuthTokens | undefined;
  discovery: OAuthDiscoveryState | undefined;

  constructor(
    readonly redirectUrl: string,
    private readonly stateValue: string,
    private readonly scope: string | undefined,
    private readonly onAuthorize: (url: URL) => void,
    reusable: OAuthClientInformationMixed | undefined,
  ) {
    this.client = reusable;
  }

  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: 'mcprl',
      redirect_uris: [this.redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      // A CLI cannot keep a secret: a public client, protected by PKCE.
      token_endpoint_auth_method: 'none',
      ...(this.scope ? { scope: this.scope } : {}),
    };
  }

  state(): string {
    return this.stateValue;
  }

  clientInformation(): OAuthClientInformationMixed | undefined {
    return this.client;
  }

  saveClientInformation(info: OAuthClientInformationMixed): void {
    this.client = info;
  }

  // A login always authorizes anew, so no stored token is offered for a refresh.
  tokens(): undefined {
    return undefined;
  }

  saveTokens(tokens: OAuthTokens): void {
    this.received = tokens;
  }

  redirectToAuthorization(url: URL): void {
    this.onAuthorize(url);
  }

  saveCodeVerifier(verifier: string): void {
    this.verifier = verifier;
  }

  codeVerifier(): string {
    if (!this.verifier) throw new McpConnectError('AUTH_FAILED', 'no authorization was started');
    return this.verifier;
  }

  saveDiscoveryState(state: OAuthDiscoveryState): void {
    this.discovery = state;
  }

  secrets(): string[] {
    return loginSecrets(this.received, this.client);
  }
}

/**
 * What the server's answer to an unauthenticated initialize says about its authorization: the WWW-Authenticate
 * header's resource_metadata URL and scope (RFC 9728 §5.1), when it answers 401.
 */
async function probe(url: string, timeoutMs: number): Promise<{ resourceMetadataUrl?: URL; scope?: string }> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'mcprl', version: '0.1.0' } },
      }),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    throw httpFailure(url, err, timeoutMs);
  }
  await res.body?.cancel().catch(() => undefined);
  if (res.status !== 401) return {};
  const { resourceMetadataUrl, scope } = extractWWWAuthenticateParams(res);
  return { resourceMetadataUrl, scope };
}

/**
 * Runs the whole login for the MCP server at `url` and stores it. The user's part, opening the authorization URL,
 * is the `authorize` event; the login waits for the redirect at most `timeoutMs`. Throws McpConnectError: AUTH_FAILED
 * when the server offers no OAuth or the authorization is refused or never comes back, UNREACHABLE and the like when
 * the server cannot be reached. No token appears in an error's message.
 */
export async function login(url: string, opts: LoginOptions = {}): Promise<LoginResult> {
  const server = serverKey(url);
  const timeoutMs = opts.timeoutMs ?? DEFAULT_LOGIN_TIMEOUT_MS;
  const state = randomBytes(24).toString('base64url');
  const listener = await listenForCode(opts.redirectPort ?? 0, state, timeoutMs);
  let provider: LoginProvider | undefined;
  try {
    opts.onEvent?.({ event: 'listening', redirectUrl: listener.redirectUrl });
    const hints = await probe(url, timeoutMs);
    const scope = opts.scope ?? hints.scope;
    // The stored registration serves again only where it names this redirect (a fixed --redirect-port).
    let reusable: OAuthClientInformationMixed | undefined;
    try {
      reusable = readLogin(url)?.clientInformation;
    } catch {
      reusable = undefined;
    }
    if (reusable && !('redirect_uris' in reusable && reusable.redirect_uris.includes(listener.redirectUrl))) reusable = undefined;
    provider = new LoginProvider(listener.redirectUrl, state, scope, (u) => opts.onEvent?.({ event: 'authorize', url: u.href }), reusable);
    const options = { serverUrl: url, resourceMetadataUrl: hints.resourceMetadataUrl, scope };

    const started = await auth(provider, options).catch((err: unknown) => {
      // Without any metadata the SDK guesses endpoints at the server's origin, and its error then names a guess.
      const d = provider?.discovery;
      if (d && !d.resourceMetadata && !d.authorizationServerMetadata) {
        throw new McpConnectError('AUTH_FAILED', `${url} does not offer OAuth (no protected-resource or authorization-server metadata)`, { cause: err });
      }
      throw err;
    });
    if (started !== 'REDIRECT') throw new McpConnectError('AUTH_FAILED', `the authorization server of ${url} did not start an authorization`);
    const code = await listener.code;
    const done = await auth(provider, { ...options, authorizationCode: code });
    const client = provider.clientInformation();
    if (done !== 'AUTHORIZED' || !provider.received || !client || !('redirect_uris' in client)) {
      throw new McpConnectError('AUTH_FAILED', `the authorization server of ${url} issued no tokens`);
    }
    // Under the login's lock: a refresh of another process then cannot write its older grant over this login.
    const received = provider.received;
    const file = await withLoginLock(url, () =>
      saveLogin({
        server,
        clientInformation: client,
        tokens: received,
        resourceMetadataUrl: hints.resourceMetadataUrl?.href,
        expiresAt: expiryOf(received),
        updatedAt: new Date().toISOString(),
      }),
    );
    opts.onEvent?.({ event: 'authorized', server, file });
    return { server, file };
  } catch (err) {
    if (err instanceof McpConnectError) {
      err.message = redact(err.message, secretValues(provider?.secrets() ?? []));
      throw err;
    }
    // The SDK's OAuth errors (invalid_client, a failed registration, …) become one AUTH_FAILED line.
    throw new McpConnectError('AUTH_FAILED', `login to ${url} failed: ${redact(errorLine(err), secretValues(provider?.secrets() ?? []))}`, { cause: err });
  } finally {
    await listener.close();
  }
}
