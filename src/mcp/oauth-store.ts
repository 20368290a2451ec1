/**
 * Where `mcprl login` keeps an OAuth login: one JSON file per MCP server (keyed by the server's canonical URL), in
 * the user's config folder, readable by the user alone. A login is the client registration the authorization
 * server gave mcprl and the tokens it issued; every command that connects to that URL uses it.
 */
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { OAuthClientInformationFullSchema, OAuthTokensSchema, type OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { z } from 'zod';
import { writeJsonAtomic } from '../util/atomic.js';
import { describeOwner, FileLock, type LockBusy } from '../util/file-lock.js';
import { McpConnectError } from './errors.js';

/** The variable that moves mcprl's config folder (tests point it at a temporary folder). */
export const CONFIG_DIR_ENV = 'MCPRL_CONFIG_DIR';

/** mcprl's per-user config folder: $MCPRL_CONFIG_DIR, else $XDG_CONFIG_HOME/mcprl, else ~/.config/mcprl. */
export function configDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env[CONFIG_DIR_ENV]) return env[CONFIG_DIR_ENV];
  const xdg = env.XDG_CONFIG_HOME;
  return join(xdg ? xdg : join(homedir(), '.config'), 'mcprl');
}

/** The folder of the login files. */
export function loginsDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(configDir(env), 'oauth');
}

/**
 * The server's canonical URL, the key of its login: scheme and host lower-cased and the default port dropped (as URL
 * parsing does), the fragment removed (RFC 8707 resource indicators carry none). Path and query stay: two MCP
 * endpoints on one host may belong to different authorization servers.
 */
export function serverKey(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new McpConnectError('CONFIG', `not a valid URL: ${url}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new McpConnectError('CONFIG', `not an http(s) URL: ${url}`);
  u.hash = '';
  return u.href;
}

/** The login file of the server at `url`: its host for people, a hash of the whole canonical URL for uniqueness. */
export function loginFile(url: string, env: NodeJS.ProcessEnv = process.env): string {
  const key = serverKey(url);
  const host = new URL(key).host.replace(/[^A-Za-z0-9.-]/g, '_');
  const hash = createHash('sha256').update(key).digest('hex').slice(0, 16);
  return join(loginsDir(env), `${host}-${hash}.json`);
}

/** One stored login (the file's content). */
export const StoredLoginSchema = z.object({
  /** The server's canonical URL (serverKey). */
  server: z.string(),
  /** The client registration: client_id (and client_secret when the authorization server issued one). */
  clientInformation: OAuthClientInformationFullSchema,
  /** The latest tokens, as the authorization server sent them (plus the issuer the SDK stamps on them). */
  tokens: OAuthTokensSchema,
  /** Where the server's 401 said its protected-resource metadata is (WWW-Authenticate), for refreshes; absent when it did not. */
  resourceMetadataUrl: z.string().optional(),
  /** When the access token expires, in ms since the epoch; absent when the server did not say (no expires_in). */
  expiresAt: z.number().optional(),
  /** When this file was last written, ISO 8601. */
  updatedAt: z.string(),
});
export type StoredLogin = z.infer<typeof StoredLoginSchema>;

/** The expiry time of freshly received tokens, in ms since the epoch, or undefined when they carry no expires_in. */
export function expiryOf(tokens: OAuthTokens, now = Date.now()): number | undefined {
  return tokens.expires_in === undefined ? undefined : now + tokens.expires_in * 1000;
}

/** The stored login for `url`, or undefined when there is none. Throws McpConnectError('CONFIG') naming a broken file. */
export function readLogin(url: string): StoredLogin | undefined {
  const file = loginFile(url);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new McpConnectError('CONFIG', `cannot read the login file ${file}: ${(err as Error).message}`, { cause: err });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new McpConnectError('CONFIG', `the login file ${file} is not JSON: run \`mcprl login ${url}\` again`);
  }
  const parsed = StoredLoginSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new McpConnectError('CONFIG', `the login file ${file} is not valid (${issue.path.join('.')}: ${issue.message}): run \`mcprl login ${url}\` again`);
  }
  return parsed.data;
}

/** Creates the logins folder (mode 0700) and tightens it to 0700 when it already existed looser. */
function ensureLoginsDir(): string {
  const dir = loginsDir();
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  return dir;
}

/** Writes `login` atomically to its file, mode 0600. Returns the file. */
export async function saveLogin(login: StoredLogin): Promise<string> {
  ensureLoginsDir();
  const file = loginFile(login.server);
  await writeJsonAtomic(file, StoredLoginSchema.parse(login), { mode: 0o600 });
  return file;
}

/**
 * The login lock's timing. A process that refreshes (or revokes) a login holds `<login file>.lock` meanwhile; others
 * wait for it, then find the new tokens in the file instead of spending the refresh token a second time (an
 * authorization server that rotates refresh tokens accepts each only once).
 */
export const LOGIN_LOCK = {
  /** How long to wait for a live holder, in ms: a refresh is one request, but a slow authorization server's may take a while. */
  waitMs: 150_000,
  /** A lock older than this, in ms, is taken over even when its holder still runs: no refresh takes that long. */
  staleAgeMs: 120_000,
  /** How often a waiting process looks at the lock again, in ms. */
  pollMs: 100,
} as const;

/** The lock file of the login for `url`. */
export function loginLockFile(url: string, env: NodeJS.ProcessEnv = process.env): string {
  return `${loginFile(url, env)}.lock`;
}

/** Overrides of LOGIN_LOCK's wait (tests shorten it and watch it). */
export interface LoginLockOptions {
  waitMs?: number;
  pollMs?: number;
  /** Called each time the lock is found held by another process, before waiting. */
  onWait?: (busy: LockBusy) => void;
}

/**
 * Runs `fn` holding the login lock of `url`: waits up to LOGIN_LOCK.waitMs for a live holder, takes over a lock whose
 * holder is gone or older than LOGIN_LOCK.staleAgeMs, and otherwise throws McpConnectError('LOGIN_LOCKED') naming
 * the lock file and its holder.
 */
export async function withLoginLock<T>(url: string, fn: () => Promise<T>, opts: LoginLockOptions = {}): Promise<T> {
  ensureLoginsDir();
  const file = loginLockFile(url);
  const got = await FileLock.acquire(file, LOGIN_LOCK.staleAgeMs, {
    waitMs: opts.waitMs ?? LOGIN_LOCK.waitMs,
    pollMs: opts.pollMs ?? LOGIN_LOCK.pollMs,
    onWait: opts.onWait,
  });
  if (!(got instanceof FileLock)) {
    throw new McpConnectError(
      'LOGIN_LOCKED',
      `the login of ${serverKey(url)} is locked by another mcprl process, ${describeOwner(got.holder)}, held in ${file}; if that process is stuck, end it or delete the lock`,
    );
  }
  try {
    return await fn();
  } finally {
    got.release();
  }
}

/** Removes the stored login for `url`; returns the file it removed, or undefined when there was none. */
export function removeLogin(url: string): string | undefined {
  const file = loginFile(url);
  try {
    rmSync(file);
    return file;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new McpConnectError('CONFIG', `cannot remove the login file ${file}: ${(err as Error).message}`, { cause: err });
  }
}

/** Removes every stored login; returns the files it removed. */
export function removeAllLogins(): string[] {
  const dir = loginsDir();
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new McpConnectError('CONFIG', `cannot read the logins folder ${dir}: ${(err as Error).message}`, { cause: err });
  }
  // The login files and the temporaries of writes a kill cut short (they hold tokens too).
  const files = names.filter((n) => n.endsWith('.json') || n.endsWith('.tmp')).map((n) => join(dir, n));
  for (const f of files) rmSync(f, { force: true });
  return files.filter((f) => f.endsWith('.json'));
}

/** The secret values of a login's tokens and client registration, for redaction. */
export function loginSecrets(tokens: OAuthTokens | undefined, client: { client_secret?: string } | undefined): string[] {
  return [tokens?.access_token, tokens?.refresh_token, tokens?.id_token, client?.client_secret].filter((v): v is string => typeof v === 'string');
}
