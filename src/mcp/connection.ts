/**
 * Opening one live connection to an MCP server: choosing the transport, the SSE fallback, the child
 * environment, the connect timeout, and turning every way this can fail into an McpConnectError with a code.
 */
import { existsSync, statSync } from 'node:fs';
import { discoverOAuthServerInfo } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport, SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { FetchLike, Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { errorLine, oneLine } from '../util/errors.js';
import { McpConnectError } from './errors.js';
import { authRequired, storedLoginProvider, type StoredLoginProvider } from './oauth-provider.js';
import { redact, secretsOf, secretValues } from './redact.js';
import type { Target } from './types.js';

export type TransportKind = 'stdio' | 'streamable-http' | 'sse';

/** One initialized client; a session replaces it when the server dies or the HTTP session expires. */
export interface Connection {
  client: Client;
  transport: Transport;
  kind: TransportKind;
  protocolVersion: string;
  /** The child's pid for stdio targets. */
  pid?: number;
}

export interface OpenOptions {
  timeoutMs: number;
  clientName: string;
  clientVersion: string;
  /** Receives the stdio server's stderr; its last lines also go into connect errors. */
  onStderr?: (chunk: string) => void;
}

/**
 * The environment a stdio server is started with. The SDK passes only a whitelist (HOME, LOGNAME, PATH, SHELL,
 * TERM, USER on POSIX) so that secrets in the parent's environment do not leak to arbitrary servers. mcprl
 * keeps that whitelist, passes PATH explicitly (a server launched via npx or a shell script needs it), and
 * adds exactly the variables the target names (the `env` of an mcpServers entry).
 */
export function childEnvironment(extra?: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = { ...getDefaultEnvironment() };
  if (process.env.PATH !== undefined) env.PATH = process.env.PATH;
  return { ...env, ...extra };
}

/** Keeps the last `max` characters written to a stream, for error messages. */
class Tail {
  private text = '';
  constructor(private readonly max: number) {}
  push(s: string): void {
    this.text = (this.text + s).slice(-this.max);
  }
  /**
   * The last `n` lines that say something, joined with " | ". Stack frames ("at …") and Node's closing "Node.js
   * vX" banner are skipped: for a Node server the cause is the line above them, not its version.
   */
  lastLines(n: number): string {
    const lines = this.text
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !/^at\s/.test(l) && !/^Node\.js v\d/.test(l));
    return lines.slice(-n).map((l) => (l.length > 300 ? `${l.slice(0, 299)}…` : l)).join(' | ');
  }
}

/** Lines of a server's stderr quoted in SERVER_EXITED errors. */
const STDERR_LINES = 4;

function errorCode(err: unknown): string | undefined {
  const e = err as { code?: unknown; cause?: { code?: unknown; errors?: { code?: unknown }[] } } | undefined;
  if (typeof e?.code === 'string') return e.code;
  if (typeof e?.cause?.code === 'string') return e.cause.code;
  // Node's fetch reports a refused dual-stack connect as an AggregateError inside `cause`.
  const inner = e?.cause?.errors?.find((x) => typeof x?.code === 'string');
  return inner?.code as string | undefined;
}

const NETWORK_CODES: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host lookup failed',
  ECONNRESET: 'connection reset',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ETIMEDOUT: 'connection timed out',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
  UND_ERR_SOCKET: 'socket error',
  CERT_HAS_EXPIRED: 'TLS certificate expired',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'self-signed TLS certificate',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'TLS certificate not trusted',
};

/**
 * Races `p` against a timer; on timeout calls `onTimeout` (which should tear the attempt down) and rejects
 * with TIMEOUT, even when tearing down made `p` itself fail first with "connection closed".
 */
async function withTimeout<T>(p: Promise<T>, ms: number, onTimeout: () => Promise<void>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  const timeoutError = () => new McpConnectError('TIMEOUT', `${what} did not complete initialize within ${ms} ms`);
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      void onTimeout().finally(() => reject(timeoutError()));
    }, ms);
  });
  timeout.catch(() => undefined);
  try {
    return await Promise.race([p, timeout]);
  } catch (err) {
    if (timedOut) throw timeoutError();
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

function newClient(opts: OpenOptions): Client {
  return new Client({ name: opts.clientName, version: opts.clientVersion }, { capabilities: {} });
}

/**
 * Connects `client` over `transport` and returns the negotiated protocol version. The SDK keeps that version
 * to itself except by handing it to `transport.setProtocolVersion`, so we listen there (stdio transports do
 * not have the hook; we add it).
 */
async function initialize(client: Client, transport: Transport, timeoutMs: number): Promise<string> {
  let negotiated = '';
  const original = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (v: string) => {
    negotiated = v;
    original?.(v);
  };
  await client.connect(transport, { timeout: timeoutMs });
  return negotiated;
}

async function openStdio(target: Extract<Target, { kind: 'stdio' }>, opts: OpenOptions): Promise<Connection> {
  if (target.cwd !== undefined && !(existsSync(target.cwd) && statSync(target.cwd).isDirectory())) {
    throw new McpConnectError('CONFIG', `working directory does not exist: ${target.cwd}`);
  }
  const tail = new Tail(8192);
  const transport = new StdioClientTransport({
    command: target.command,
    args: target.args,
    env: childEnvironment(target.env),
    cwd: target.cwd,
    stderr: 'pipe',
  });
  // Reading stderr also keeps a chatty server from blocking on a full pipe.
  transport.stderr?.on('data', (d: Buffer) => {
    const s = d.toString('utf8');
    tail.push(s);
    opts.onStderr?.(s);
  });
  const client = newClient(opts);
  const what = `stdio server '${target.command}'`;
  try {
    const protocolVersion = await withTimeout(
      initialize(client, transport, opts.timeoutMs),
      opts.timeoutMs,
      async () => {
        // A server stuck before initialize gets no grace period (the SDK's close waits 2 s for stdin EOF).
        const pid = transport.pid;
        if (pid) {
          try {
            process.kill(pid, 'SIGTERM');
          } catch {
            // Already gone.
          }
        }
        await client.close().catch(() => undefined);
      },
      what,
    );
    return { client, transport, kind: 'stdio', protocolVersion, pid: transport.pid ?? undefined };
  } catch (err) {
    await client.close().catch(() => undefined);
    if (err instanceof McpConnectError) throw err;
    const code = errorCode(err);
    if (code === 'ENOENT') throw new McpConnectError('COMMAND_NOT_FOUND', `command not found: ${target.command}`, { cause: err });
    if (code === 'EACCES') throw new McpConnectError('SPAWN_FAILED', `command is not executable: ${target.command}`, { cause: err });
    if (err instanceof McpError && err.code === ErrorCode.ConnectionClosed) {
      const last = tail.lastLines(STDERR_LINES);
      throw new McpConnectError('SERVER_EXITED', `${what} exited during initialize${last ? `: ${oneLine(last)}` : ''}`, { cause: err });
    }
    if (err instanceof McpError && err.code === ErrorCode.RequestTimeout) {
      throw new McpConnectError('TIMEOUT', `${what} did not complete initialize within ${opts.timeoutMs} ms`, { cause: err });
    }
    if (code) throw new McpConnectError('SPAWN_FAILED', `cannot start ${target.command}: ${errorLine(err)}`, { cause: err });
    throw new McpConnectError('PROTOCOL', `${what} failed to initialize: ${errorLine(err)}`, { cause: err });
  }
}

function httpStatusOf(err: unknown): number | undefined {
  if (err instanceof StreamableHTTPError || err instanceof SseError) {
    return typeof err.code === 'number' && err.code > 0 ? err.code : undefined;
  }
  return undefined;
}

/** Exported for `mcprl login`, whose first request to the server fails in the same ways. */
export function httpFailure(url: string, err: unknown, timeoutMs: number): McpConnectError {
  if (err instanceof McpConnectError) return err;
  const code = errorCode(err);
  if (code && NETWORK_CODES[code]) {
    return new McpConnectError('UNREACHABLE', `cannot reach ${url}: ${NETWORK_CODES[code]} (${code})`, { cause: err });
  }
  if (err instanceof TypeError && /fetch failed/i.test(err.message)) {
    return new McpConnectError('UNREACHABLE', `cannot reach ${url}: ${errorLine(err.cause ?? err)}`, { cause: err });
  }
  const status = httpStatusOf(err);
  if (status === 401 || status === 403) {
    return new McpConnectError(
      'HTTP_ERROR',
      `HTTP ${status} from ${url}: the server wants credentials; pass them with --header 'Authorization: Bearer <token>'`,
      { cause: err },
    );
  }
  if (status !== undefined) return new McpConnectError('HTTP_ERROR', `HTTP ${status} from ${url}: ${errorLine(err)}`, { cause: err });
  if (err instanceof McpError && err.code === ErrorCode.RequestTimeout) {
    return new McpConnectError('TIMEOUT', `HTTP server ${url} did not complete initialize within ${timeoutMs} ms`, { cause: err });
  }
  return new McpConnectError('PROTOCOL', `HTTP server ${url} failed to initialize: ${errorLine(err)}`, { cause: err });
}

/** True when the target's own headers carry credentials: they take precedence over a stored OAuth login. */
function hasAuthorizationHeader(headers: Record<string, string> | undefined): boolean {
  return Object.keys(headers ?? {}).some((h) => h.toLowerCase() === 'authorization');
}

/**
 * Whether the server at `url` advertises OAuth: protected-resource metadata (RFC 9728) or authorization-server
 * metadata (RFC 8414) where the SDK's discovery looks. A 401 from a server that does not is about other credentials.
 */
async function offersOAuth(url: string, timeoutMs: number): Promise<boolean> {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const info = await discoverOAuthServerInfo(url, { fetchFn: (u, init) => fetch(u, { ...init, signal }) });
    return info.resourceMetadata !== undefined || info.authorizationServerMetadata !== undefined;
  } catch {
    return false;
  }
}

/** What a connection's login fetch saw: the failure it met, for the error of a connect that fails on it. */
interface LoginFetchState {
  failure?: McpConnectError;
}

/**
 * The fetch of a connection with a stored login, for both HTTP transports: it sends the login's access token, and
 * when the server answers 401 it refreshes the token once (StoredLoginProvider.refresh: under the login's lock, or
 * taking another process's refresh) and repeats the request once. A second 401 goes back to the transport, and
 * `state.failure` says why.
 */
function loginFetch(url: string, login: StoredLoginProvider, state: LoginFetchState): FetchLike {
  return async (input, init) => {
    const send = (token: string) => {
      const headers = new Headers(init?.headers);
      headers.set('authorization', `Bearer ${token}`);
      return fetch(input, { ...init, headers });
    };
    try {
      const token = await login.accessToken();
      const first = await send(token);
      if (first.status !== 401) return first;
      await first.body?.cancel().catch(() => undefined);
      await login.refresh(token);
      const again = await send(await login.accessToken());
      if (again.status === 401) state.failure = authRequired(url, 'the server refused the access token even after a refresh');
      return again;
    } catch (err) {
      if (err instanceof McpConnectError) state.failure = err;
      throw err;
    }
  };
}

async function openHttp(target: Extract<Target, { kind: 'http' }>, opts: OpenOptions, login: StoredLoginProvider | undefined): Promise<Connection> {
  let url: URL;
  try {
    url = new URL(target.url);
  } catch {
    throw new McpConnectError('CONFIG', `not a valid URL: ${target.url}`);
  }
  const requestInit: RequestInit = { headers: target.headers ?? {} };
  const what = `HTTP server ${target.url}`;
  const state: LoginFetchState = {};
  // With a stored login the transports fetch through it; the SDK's own OAuth (authProvider) is never used.
  const fetchFn = login ? loginFetch(target.url, login, state) : undefined;

  const attempt = async (kind: 'streamable-http' | 'sse'): Promise<Connection> => {
    const transport =
      kind === 'sse' ? new SSEClientTransport(url, { requestInit, fetch: fetchFn }) : new StreamableHTTPClientTransport(url, { requestInit, fetch: fetchFn });
    const client = newClient(opts);
    try {
      const protocolVersion = await withTimeout(
        initialize(client, transport, opts.timeoutMs),
        opts.timeoutMs,
        () => client.close().catch(() => undefined),
        what,
      );
      return { client, transport, kind, protocolVersion };
    } catch (err) {
      await client.close().catch(() => undefined);
      throw err;
    }
  };

  try {
    return await attempt('streamable-http');
  } catch (err) {
    if (state.failure) throw state.failure;
    const status = httpStatusOf(err);
    if (status === 401 && login) throw authRequired(target.url, 'the server refused the stored login');
    if (status === 401 && !hasAuthorizationHeader(target.headers) && (await offersOAuth(target.url, opts.timeoutMs))) {
      throw authRequired(target.url);
    }
    // Servers that only speak the older HTTP+SSE transport answer the initialize POST with a 4xx (usually
    // 404 or 405); the spec's backwards-compatibility rule is to retry with SSE on a new client.
    if (status === undefined || status < 400 || status >= 500) throw httpFailure(target.url, err, opts.timeoutMs);
    try {
      return await attempt('sse');
    } catch (sseErr) {
      if (state.failure) throw state.failure;
      const first = httpFailure(target.url, err, opts.timeoutMs);
      if (status === 401 || status === 403) throw first;
      throw new McpConnectError(
        first.code,
        `${first.message}; the SSE fallback failed too: ${httpFailure(target.url, sseErr, opts.timeoutMs).message}`,
        { cause: sseErr },
      );
    }
  }
}

/**
 * Opens and initializes one connection, or throws McpConnectError. An HTTP target without an Authorization header
 * uses the login `mcprl login` stored for its URL, if any. The error's message may quote the server (stderr, an
 * HTTP error body), so the target's header and environment values and the login's tokens are redacted from it.
 */
export async function openConnection(target: Target, opts: OpenOptions): Promise<Connection> {
  let login: StoredLoginProvider | undefined;
  try {
    if (target.kind === 'stdio') return await openStdio(target, opts);
    login = hasAuthorizationHeader(target.headers) ? undefined : storedLoginProvider(target.url);
    return await openHttp(target, opts, login);
  } catch (err) {
    if (err instanceof Error) {
      // Longest first, as redact wants, so that no part of a longer secret survives a shorter one's replacement.
      const secrets = [...secretsOf(target), ...secretValues(login?.secrets() ?? [])].sort((a, b) => b.length - a.length);
      err.message = redact(err.message, secrets);
    }
    throw err;
  }
}

/** True when `err` means the request never reached a live server session, so repeating it is safe. */
export function isRequestNotDelivered(err: unknown): boolean {
  if (err instanceof StreamableHTTPError) {
    // 404 is the spec's "session expired"; some servers (server-everything) answer 400 to an unknown session.
    return err.code === 404 || (err.code === 400 && /session/i.test(err.message));
  }
  if (err instanceof Error && /^Not connected$/.test(err.message)) return true;
  const code = errorCode(err);
  return code === 'ECONNREFUSED' || code === 'EPIPE';
}

/** True when the connection died while a request was in flight (the server may or may not have acted). */
export function isConnectionLost(err: unknown): boolean {
  if (err instanceof McpError && err.code === ErrorCode.ConnectionClosed && /connection closed/i.test(err.message)) return true;
  if (err instanceof TypeError && /fetch failed|terminated/i.test(err.message)) return true;
  const code = errorCode(err);
  return code === 'ECONNRESET' || code === 'UND_ERR_SOCKET';
}
