/**
 * The OAuth client provider every non-interactive connection uses: it hands the SDK's HTTP transports the stored
 * login's access token, lets the SDK refresh it (on a 401, or here first when the token has expired), and saves
 * what the refresh returns. It never starts an authorization in a browser: where the SDK would, it throws
 * AUTH_REQUIRED, which tells the user to run `mcprl login <url>`.
 */
import { auth, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientInformationFull, OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { McpConnectError } from './errors.js';
import { expiryOf, loginSecrets, readLogin, saveLogin, serverKey, type StoredLogin } from './oauth-store.js';

/** A token this close to its expiry is refreshed before use, in ms: it could expire on its way to the server. */
const EXPIRY_MARGIN_MS = 30_000;

/** A redirect URL for a stored registration that names none (no authorization is ever started here). */
const UNUSED_REDIRECT = 'http://127.0.0.1/callback';

/** The one-line error of a server whose login is missing or refused. */
export function authRequired(url: string, why?: string): McpConnectError {
  return new McpConnectError('AUTH_REQUIRED', `${url} requires OAuth: run \`mcprl login ${url}\`${why ? ` (${why})` : ''}`);
}

export class StoredLoginProvider implements OAuthClientProvider {
  /** Every token and secret this provider has held, for redacting error messages. */
  private readonly seen = new Set<string>();
  /** Set when the authorization server refused the stored tokens: they are not offered again. */
  private refused = false;
  /** The refresh in progress, which concurrent connections of this process share. */
  private refreshing: Promise<void> | undefined;

  constructor(
    /** The URL the user gave (the one named in messages). */
    private readonly url: string,
    private login: StoredLogin,
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

  // The SDK treats a provider without a redirect URL as a machine-to-machine client (client_credentials), so the
  // one registered at login is returned; nothing ever listens there after login.
  get redirectUrl(): string {
    return this.login.clientInformation.redirect_uris[0] ?? UNUSED_REDIRECT;
  }

  get clientMetadata(): OAuthClientMetadata {
    return this.login.clientInformation;
  }

  clientInformation(): OAuthClientInformationMixed {
    return this.login.clientInformation;
  }

  /**
   * The SDK calls this to stamp the stored registration with its authorization server (same client_id, kept) or
   * to save a new registration, which only `mcprl login` may make.
   */
  async saveClientInformation(info: OAuthClientInformationMixed): Promise<void> {
    if (info.client_id !== this.login.clientInformation.client_id) {
      throw authRequired(this.url, 'its authorization server no longer knows the stored client');
    }
    await this.persist({ ...this.login, clientInformation: { ...this.login.clientInformation, ...info } as OAuthClientInformationFull });
  }

  async tokens(): Promise<OAuthTokens | undefined> {
    if (this.refused) return undefined;
    // A refresh that fails here is left to the SDK's 401 path, which reads what the server's answer says.
    if (this.expired() && this.login.tokens.refresh_token) await this.refresh().catch(() => undefined);
    return this.refused ? undefined : this.login.tokens;
  }

  async saveTokens(tokens: OAuthTokens): Promise<void> {
    await this.persist({ ...this.login, tokens, expiresAt: expiryOf(tokens) });
  }

  redirectToAuthorization(): never {
    throw authRequired(this.url, this.refused ? 'the stored login was refused by its authorization server' : 'the stored login has expired');
  }

  saveCodeVerifier(): void {
    // Only an authorization started here would need one, and none is.
  }

  codeVerifier(): never {
    throw authRequired(this.url);
  }

  /**
   * The SDK calls this when the authorization server answers invalid_grant or invalid_client. The file is left
   * alone (another process may have refreshed it meanwhile); this process stops offering what was refused.
   */
  invalidateCredentials(scope: 'all' | 'client' | 'tokens' | 'verifier' | 'discovery'): void {
    if (scope === 'all' || scope === 'client' || scope === 'tokens') this.refused = true;
  }

  private expired(): boolean {
    return this.login.expiresAt !== undefined && this.login.expiresAt - EXPIRY_MARGIN_MS <= Date.now();
  }

  private async persist(login: StoredLogin): Promise<void> {
    this.login = { ...login, updatedAt: new Date().toISOString() };
    this.remember(this.login);
    await saveLogin(this.login);
  }

  /**
   * Refreshes the expired access token before it is sent. The SDK only refreshes after a 401; refreshing first saves
   * the round trip and, shared by all of this process's connections, makes one refresh where a 401 apiece would make
   * many (an authorization server that rotates refresh tokens accepts only the first).
   */
  private refresh(): Promise<void> {
    if (!this.refreshing) {
      const refreshing = this.refreshOnce();
      this.refreshing = refreshing;
      // Cleared once settled (its failure reaches the callers awaiting it, not this bookkeeping).
      refreshing.then(
        () => this.settle(refreshing),
        () => this.settle(refreshing),
      );
    }
    return this.refreshing;
  }

  private settle(refreshing: Promise<void>): void {
    if (this.refreshing === refreshing) this.refreshing = undefined;
  }

  private async refreshOnce(): Promise<void> {
    // Another process may have refreshed the file already.
    const onDisk = readLogin(this.url);
    if (onDisk) this.adopt(onDisk);
    if (!this.expired()) return;
    // auth() asks the provider for the refresh token, so it gets a view whose tokens() does not refresh again.
    const { resourceMetadataUrl } = this.login;
    await auth(this.withoutRefresh(), { serverUrl: this.url, resourceMetadataUrl: resourceMetadataUrl ? new URL(resourceMetadataUrl) : undefined });
  }

  private withoutRefresh(): OAuthClientProvider {
    return {
      redirectUrl: this.redirectUrl,
      clientMetadata: this.clientMetadata,
      clientInformation: () => this.clientInformation(),
      saveClientInformation: (info) => this.saveClientInformation(info),
      tokens: () => (this.refused ? undefined : this.login.tokens),
      saveTokens: (tokens) => this.saveTokens(tokens),
      redirectToAuthorization: () => this.redirectToAuthorization(),
      saveCodeVerifier: () => this.saveCodeVerifier(),
      codeVerifier: () => this.codeVerifier(),
      invalidateCredentials: (scope) => this.invalidateCredentials(scope),
    };
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
