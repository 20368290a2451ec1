/**
 * `mcprl logout <url>`: the stored login's tokens are revoked at its authorization server's RFC 7009
 * `revocation_endpoint` (the refresh token first, so that no new access token can be made from it, then the access
 * token), and the login file is deleted whatever the revocation's outcome: a user who logs out wants the tokens gone
 * from this machine even when the authorization server cannot be told.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { errorLine, oneLine } from '../util/errors.js';
import { McpConnectError } from './errors.js';
import { authorizationServerOf } from './oauth-provider.js';
import {
  loginSecrets,
  loginsDir,
  readLogin,
  removeAllLogins,
  removeLogin,
  serverKey,
  StoredLoginSchema,
  withLoginLock,
  type LoginLockOptions,
  type StoredLogin,
} from './oauth-store.js';
import { redact, secretValues } from './redact.js';

/** How long one revocation request may take, in ms. */
export const REVOCATION_TIMEOUT_MS = 30_000;

/** The RFC 7009 fields of authorization-server metadata (RFC 8414 §2). */
const RevocationMetadataSchema = z.object({
  revocation_endpoint: z.string().url().optional(),
  revocation_endpoint_auth_methods_supported: z.array(z.string()).optional(),
});

export type RevokedToken = 'refresh_token' | 'access_token';

export interface LogoutResult {
  /** The server's canonical URL. */
  server: string;
  /** The login file removed; undefined when none was stored. */
  file?: string;
  /** The tokens the authorization server confirmed revoked, in the order they were revoked. */
  revoked: RevokedToken[];
  /** Why the tokens were not (all) revoked, for one line to the user; undefined when they were, or none was stored. */
  notRevoked?: string;
}

export interface LogoutOptions {
  /** Overrides of the login lock's wait (tests). */
  lock?: LoginLockOptions;
}

/** Revokes the login's tokens; returns the ones revoked and, when any was not, why. Never throws. */
async function revoke(url: string, login: StoredLogin): Promise<{ revoked: RevokedToken[]; notRevoked?: string }> {
  const revoked: RevokedToken[] = [];
  const secrets = secretValues(loginSecrets(login.tokens, login.clientInformation));
  try {
    const server = await authorizationServerOf(url, login);
    // OpenID Connect discovery documents are typed without RFC 7009's fields, though they may carry them.
    const meta = RevocationMetadataSchema.safeParse(server.metadata ?? {});
    const endpoint = meta.success ? meta.data.revocation_endpoint : undefined;
    if (!endpoint) return { revoked, notRevoked: `the authorization server ${server.url} offers no token revocation (RFC 7009)` };
    const client = login.clientInformation;
    const methods = meta.success ? meta.data.revocation_endpoint_auth_methods_supported : undefined;
    const basic = client.client_secret !== undefined && methods !== undefined && !methods.includes('client_secret_post') && methods.includes('client_secret_basic');
    const tokens: [RevokedToken, string | undefined][] = [
      ['refresh_token', login.tokens.refresh_token],
      ['access_token', login.tokens.access_token],
    ];
    for (const [hint, token] of tokens) {
      if (token === undefined) continue;
      const body = new URLSearchParams({ token, token_type_hint: hint });
      const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded' };
      if (basic) {
        headers.authorization = `Basic ${Buffer.from(`${encodeURIComponent(client.client_id)}:${encodeURIComponent(client.client_secret!)}`).toString('base64')}`;
      } else {
        body.set('client_id', client.client_id);
        if (client.client_secret !== undefined) body.set('client_secret', client.client_secret);
      }
      const res = await fetch(endpoint, { method: 'POST', headers, body, signal: AbortSignal.timeout(REVOCATION_TIMEOUT_MS) });
      // RFC 7009 §2.2: 200 whether or not the token was still valid.
      if (res.status !== 200) {
        const text = oneLine(await res.text().catch(() => '')).slice(0, 200);
        return { revoked, notRevoked: `${endpoint} answered HTTP ${res.status} to revoking the ${hint.replace('_', ' ')}${text ? `: ${redact(text, secrets)}` : ''}` };
      }
      await res.body?.cancel().catch(() => undefined);
      revoked.push(hint);
    }
    return { revoked };
  } catch (err) {
    return { revoked, notRevoked: `revocation failed: ${redact(errorLine(err), secrets)}` };
  }
}

/**
 * Logs out of the server at `url`: revokes the stored tokens, then deletes the login file (in any case). Holds the
 * login's lock meanwhile, so that a refresh of another process cannot write new tokens back after the deletion.
 * A login file that cannot be read is deleted without revocation.
 */
export async function logout(url: string, opts: LogoutOptions = {}): Promise<LogoutResult> {
  const server = serverKey(url);
  return withLoginLock(
    url,
    async () => {
      let login: StoredLogin | undefined;
      let unreadable: string | undefined;
      try {
        login = readLogin(url);
      } catch (err) {
        if (!(err instanceof McpConnectError)) throw err;
        unreadable = err.message;
      }
      const outcome = login ? await revoke(url, login) : { revoked: [], notRevoked: unreadable && `the login file could not be read (${unreadable})` };
      const file = removeLogin(url);
      return { server, file, ...outcome };
    },
    opts.lock,
  );
}

/**
 * Logs out of every stored login (as logout does), then removes what is left in the logins folder: files that are
 * no login mcprl can read (deleted without revocation) and temporaries of writes a kill cut short. Returns the
 * logouts and the other login files removed.
 */
export async function logoutAll(opts: LogoutOptions = {}): Promise<{ results: LogoutResult[]; removed: string[] }> {
  const dir = loginsDir();
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { results: [], removed: [] };
    throw new McpConnectError('CONFIG', `cannot read the logins folder ${dir}: ${(err as Error).message}`, { cause: err });
  }
  const results: LogoutResult[] = [];
  for (const name of names.filter((n) => n.endsWith('.json'))) {
    let server: string | undefined;
    try {
      server = StoredLoginSchema.parse(JSON.parse(readFileSync(join(dir, name), 'utf8'))).server;
    } catch {
      server = undefined;
    }
    if (server !== undefined) results.push(await logout(server, opts));
  }
  return { results, removed: removeAllLogins() };
}
