/**
 * The stored login every non-interactive connection uses: it hands out the login's access token, refreshes it
 * (when the file says it has expired, or after the MCP server answered 401) and saves what the refresh returns.
 * Every refresh is made here, under the login's lock (oauth-store.ts withLoginLock), after reading the file again:
 * when another process refreshed meanwhile its tokens are taken instead, so a refresh token that the authorization
 * server rotates is spent once. The SDK is never handed the login (its transports get a fetch that adds the token),
 * so it never refreshes on its own, nor starts an authorization: where one is needed, AUTH_REQUIRED tells the user
 * to run `mcprl login <url>`.
 */
import { discoverOAuthServerInfo, refreshAuthorization } from '@modelcontextprotocol/sdk/client/auth.js';
import { InvalidClientError, InvalidGrantError, UnauthorizedClientError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import type { AuthorizationServerMetadata } from '@modelcontextprotocol/sdk/shared/auth.js';
import { errorLine } from '../util/errors.js';
import { McpConnectError } from './errors.js';
import { expiryOf, loginSecrets, readLogin, saveLogin, serverKey, withLoginLock, type LoginLockOptions, type StoredLogin } from './oauth-store.js';

/** A token this close to its expiry is refreshed before use, in ms: it could expire on its way to the server. */
const EXPIRY_MARGIN_MS = 30_000;

/** The one-line error of a server whose login is missing or refused. */
export function authRequired(url: string, why?: string): McpConnectError {
  return new McpConnectError('AUTH_REQUIRED', `${url} requires OAuth: run \`mcprl login ${url}\`${why ? ` (${why})` : ''}`);
}

/** The authorization server of a stored login, as its MCP server's protected-resource metadata names it. */
export interface AuthorizationServer {
  url: string;
  metadata?: AuthorizationServerMetadata;
  /** The resource indicator (RFC 8707) the tokens were issued for, when the metadata names one. */
  resource?: string;
}

/** Discovers the authorization server of the login for `url`; throws AUTH_FAILED naming what could not be read. */
export async function authorizationServerOf(url: string, login: StoredLogin): Promise<AuthorizationServer> {
  try {
    const info = await discoverOAuthServerInfo(url, { resourceMetadataUrl: login.resourceMetadataUrl ? new URL(login.resourceMetadataUrl) : undefined });
    return { url: info.authorizationServerUrl, metadata: info.authorizationServerMetadata, resource: info.resourceMetadata?.resource };
  } catch (err) {
    throw new McpConnectError('AUTH_FAILED', `cannot find the authorization server of ${url}: ${errorLine(err)}`, { cause: err });
  }
}

export interface StoredLoginOptions {
  /** Overrides of the login lock's wait (tests). */
  lock?: LoginLockOptions;
}

export class StoredLoginProvider {
  /** Every token and secret this provider has held, for redacting error messages. */
  private readonly seen = new Set<string>();
  /** Set when the authorization server refused the stored refresh token: it is not offered again. */
  private refused = false;
  /** The refresh in progress, which concurrent connections of this process share. */
  private refreshing: Promise<void> | undefined;

  constructor(
    /** The URL the user gave (the one named in messages). */
    private readonly url: string,
    private login: StoredLogin,
    private readonly opts: StoredLoginOptions = {},
  ) {
    this.remember(login);
  }

  private remember(login: StoredLogin): void {
    for (const s of loginSecrets(login.tokens, login.clientInformation)) this.seen.add(s);
  }

  /** The tokens and secrets this provider has held. */
  secrets(): string[] {
    return [...this.seen];
  }

  /** Adopts the file's login when it is newer than the one held (another process or `mcprl login` wrote it). */
  adopt(login: StoredLogin): void {
    if (login.updatedAt <= this.login.updatedAt) return;
    this.login = login;
    this.refused = false;
    this.remember(login);
  }

  /** The access token to send, refreshed first when the login says it has expired (which saves a 401). */
  async accessToken(): Promise<string> {
    const current = this.login.tokens.access_token;
    if (this.expired() && this.login.tokens.refresh_token && !this.refused) await this.refresh(current);
    return this.login.tokens.access_token;
  }

  /**
   * Replaces the access token `failed` (the server answered 401, or it has expired) with a fresh one. Concurrent
   * callers of this process share one refresh; one that holds an older token than the current finds it replaced
   * already. Throws AUTH_REQUIRED when the authorization server refuses the refresh or the login holds no refresh
   * token, AUTH_FAILED when the authorization server cannot be asked, LOGIN_LOCKED when another process holds the lock.
   */
  refresh(failed: string): Promise<void> {
    if (this.login.tokens.access_token !== failed) return Promise.resolve();
    if (!this.refreshing) {
      this.refreshing = withLoginLock(this.url, () => this.refreshLocked(failed), this.opts.lock).finally(() => {
        this.refreshing = undefined;
      });
    }
    return this.refreshing;
  }

  private async refreshLocked(failed: string): Promise<void> {
    // Another process may have refreshed while this one waited for the lock: the file has the newest tokens.
    const onDisk = readLogin(this.url);
    if (!onDisk) throw authRequired(this.url, 'the stored login was removed');
    this.adopt(onDisk);
    if (this.login.tokens.access_token !== failed) return;
    if (this.refused) throw authRequired(this.url, 'the stored login was refused by its authorization server');
    const refreshToken = this.login.tokens.refresh_token;
    if (!refreshToken) throw authRequired(this.url, 'the stored login has expired and holds no refresh token');
    const server = await authorizationServerOf(this.url, this.login);
    let tokens;
    try {
      tokens = await refreshAuthorization(server.url, {
        metadata: server.metadata,
        clientInformation: this.login.clientInformation,
        refreshToken,
        resource: server.resource,
      });
    } catch (err) {
      if (err instanceof InvalidGrantError || err instanceof InvalidClientError || err instanceof UnauthorizedClientError) {
        this.refused = true;
        throw authRequired(this.url, 'the stored login was refused by its authorization server');
      }
      throw new McpConnectError('AUTH_FAILED', `refreshing the login of ${this.url} at ${server.url} failed: ${errorLine(err)}`, { cause: err });
    }
    await this.persist({ ...this.login, tokens, expiresAt: expiryOf(tokens) });
  }

  private expired(): boolean {
    return this.login.expiresAt !== undefined && this.login.expiresAt - EXPIRY_MARGIN_MS <= Date.now();
  }

  private async persist(login: StoredLogin): Promise<void> {
    this.login = { ...login, updatedAt: new Date().toISOString() };
    this.remember(this.login);
    await saveLogin(this.login);
  }
}

/** One provider per server and process, so that concurrent connections share its refreshes. */
const providers = new Map<string, StoredLoginProvider>();

/**
 * The provider of the stored login for `url`, or undefined when there is none. Reads the file each time, so a login
 * made while this process runs (`mcprl mcp` is long-lived) is picked up at its next connection.
 */
export function storedLoginProvider(url: string): StoredLoginProvider | undefined {
  const key = serverKey(url);
  const login = readLogin(url);
  const existing = providers.get(key);
  if (!login) {
    providers.delete(key);
    return undefined;
  }
  if (existing) {
    existing.adopt(login);
    return existing;
  }
  const provider = new StoredLoginProvider(url, login);
  providers.set(key, provider);
  return provider;
}
