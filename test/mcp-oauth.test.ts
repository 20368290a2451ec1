/**
 * `mcprl login` against a real OAuth-protected MCP server (test/helpers/oauth-server.ts: the SDK's own authorization
 * server handlers and bearer-auth middleware, tokens issued in memory). The CLI runs as child processes; the test
 * plays the browser by following the authorization URL that `mcprl login --json` reports, and waits only on the
 * CLI's JSON events and exits, never on time (each test has the suite's generous timeout: a loaded machine
 * takes over 10 s per CLI start).
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { discoverOAuthServerInfo, refreshAuthorization } from '@modelcontextprotocol/sdk/client/auth.js';
import { InvalidGrantError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../src/mcp/session.js';
import { McpConnectError } from '../src/mcp/errors.js';
import { login } from '../src/mcp/oauth-login.js';
import { logout } from '../src/mcp/oauth-logout.js';
import { CONFIG_DIR_ENV, LOGIN_LOCK, loginFile, loginLockFile, readLogin, removeLogin, saveLogin, StoredLoginSchema, withLoginLock } from '../src/mcp/oauth-store.js';
import { FileLock, processStart, readLockFileOwner, type LockOwner } from '../src/util/file-lock.js';
import { runCli } from './helpers/cli.js';
import { REPO_ROOT } from './helpers/servers.js';
import { startEchoingServer, startOAuthMcpServer, startPlain401Server, type OAuthMcpServer } from './helpers/oauth-server.js';

/** The other mcprl processes of the login-lock race. */
const REFRESHER = join(REPO_ROOT, 'test', 'helpers', 'oauth-refresher.ts');

interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Collects a child's output; `event(name)` resolves with the first JSON line on stdout whose `event` is `name`. */
function watch(child: ChildProcessWithoutNullStreams) {
  let stdout = '';
  let stderr = '';
  const waiters: { name: string; resolve: (e: Record<string, unknown>) => void; reject: (err: Error) => void }[] = [];
  const events: Record<string, unknown>[] = [];
  const offer = () => {
    for (const w of [...waiters]) {
      const e = events.find((x) => x.event === w.name);
      if (e) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(e);
      }
    }
  };
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
    const lines = stdout.split('\n');
    events.length = 0;
    // Only complete lines; other commands' output (inspect --json is pretty-printed) is no event and skipped.
    for (const line of lines.slice(0, -1)) {
      try {
        const e = JSON.parse(line) as unknown;
        if (e && typeof e === 'object' && 'event' in e) events.push(e as Record<string, unknown>);
      } catch {
        // Not a JSON line.
      }
    }
    offer();
  });
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const finished = new Promise<Finished>((resolve) =>
    child.on('exit', (code) => {
      for (const w of waiters) w.reject(new Error(`exited with ${code} before '${w.name}': ${stderr}`));
      resolve({ code, stdout, stderr });
    }),
  );
  return {
    event: (name: string) => new Promise<Record<string, unknown>>((resolve, reject) => (waiters.push({ name, resolve, reject }), offer())),
    finished,
  };
}

describe('remote MCP servers behind OAuth (mcprl login)', () => {
  let server: OAuthMcpServer;
  let configDir: string;
  let env: NodeJS.ProcessEnv;
  /** Everything every CLI run printed, checked at the end for tokens. */
  let printed = '';

  const cli = async (args: string[]): Promise<Finished> => {
    const out = await watch(runCli(args, env)).finished;
    printed += out.stdout + out.stderr;
    return out;
  };

  /** `mcprl login URL --json`, with the test as the browser: it opens the URL and follows the redirect back. */
  const login = async (): Promise<Finished> => {
    const child = watch(runCli(['login', server.url, '--json'], env));
    const { url } = (await child.event('authorize')) as { url: string };
    // PKCE with S256, a state, and the MCP server named as the resource (RFC 8707).
    const asked = new URL(url).searchParams;
    expect(asked.get('code_challenge_method')).toBe('S256');
    expect(asked.get('state')).toBeTruthy();
    expect(asked.get('resource')).toBe(server.url);
    const approved = await fetch(url, { redirect: 'manual' });
    expect(approved.status).toBe(302);
    const back = await fetch(approved.headers.get('location')!);
    expect(back.status).toBe(200);
    const out = await child.finished;
    printed += out.stdout + out.stderr;
    return out;
  };

  /** Runs `fn` in this process with the test's config folder, for connections made here rather than by the CLI. */
  const inConfigDir = async (fn: () => Promise<void>): Promise<void> => {
    const previous = process.env[CONFIG_DIR_ENV];
    process.env[CONFIG_DIR_ENV] = env[CONFIG_DIR_ENV];
    try {
      await fn();
    } finally {
      if (previous === undefined) delete process.env[CONFIG_DIR_ENV];
      else process.env[CONFIG_DIR_ENV] = previous;
    }
  };

  const stored = async () => StoredLoginSchema.parse(JSON.parse(await readFile(loginFile(server.url, env), 'utf8')));

  beforeAll(async () => {
    server = await startOAuthMcpServer();
    configDir = await mkdtemp(join(tmpdir(), 'mcprl-oauth-'));
    env = { ...process.env, [CONFIG_DIR_ENV]: join(configDir, 'mcprl') };
  });

  afterAll(async () => {
    await server?.close();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  it('without a login, a command fails with one line that says to log in', async () => {
    const out = await cli(['inspect', server.url]);
    expect(out.code).toBe(1);
    expect(out.stderr).toBe(`mcprl inspect: AUTH_REQUIRED: ${server.url} requires OAuth: run \`mcprl login ${server.url}\`\n`);
    expect(server.provider.counts.authorizations).toBe(0);
  });

  it('logs in (discovery, registration, PKCE, loopback redirect), stores the login 0600, and inspect then connects', async () => {
    const out = await login();
    expect(out.code, out.stderr).toBe(0);
    const events = out.stdout.trim().split('\n').map((l) => JSON.parse(l) as { event: string; name?: string });
    expect(events.map((e) => e.event)).toEqual(['listening', 'authorize', 'authorized', 'connected']);
    expect(events[3].name).toBe('mcprl-bookshop');
    expect(server.provider.counts).toMatchObject({ authorizations: 1, codeExchanges: 1 });

    const file = loginFile(server.url, env);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect((await stat(join(configDir, 'mcprl', 'oauth'))).mode & 0o777).toBe(0o700);
    const saved = await stored();
    expect(saved.server).toBe(server.url);
    expect(saved.resourceMetadataUrl).toBe(new URL('/.well-known/oauth-protected-resource/mcp', server.url).href);
    expect(server.provider.issued).toContain(saved.tokens.access_token);

    const inspect = await cli(['inspect', '--json', server.url]);
    expect(inspect.code, inspect.stderr).toBe(0);
    expect((JSON.parse(inspect.stdout) as { server: { name: string } }).server.name).toBe('mcprl-bookshop');
  });

  it('refreshes a token the server has expired (the 401 path) and keeps the rotated tokens', async () => {
    const before = await stored();
    const refreshes = server.provider.counts.refreshes;
    server.provider.expireAccessTokens();
    const out = await cli(['inspect', server.url]);
    expect(out.code, out.stderr).toBe(0);
    expect(server.provider.counts.refreshes).toBe(refreshes + 1);
    const after = await stored();
    expect(after.tokens.access_token).not.toBe(before.tokens.access_token);
    expect(after.tokens.refresh_token).not.toBe(before.tokens.refresh_token);
    expect((await stat(loginFile(server.url, env))).mode & 0o777).toBe(0o600);
  });

  it('refreshes a token the login file says has expired before sending it, once for concurrent connections', async () => {
    const saved = await stored();
    await writeFile(loginFile(server.url, env), JSON.stringify({ ...saved, expiresAt: 0 }), { mode: 0o600 });
    const refreshes = server.provider.counts.refreshes;
    // In this process, so that several connections share one provider: the authorization server rotates refresh
    // tokens, so a second refresh with the same one would be refused.
    await inConfigDir(async () => {
      const sessions = await Promise.all([1, 2, 3].map(() => connect({ kind: 'http', url: server.url })));
      expect(sessions.map((s) => s.server.name)).toEqual(['mcprl-bookshop', 'mcprl-bookshop', 'mcprl-bookshop']);
      await Promise.all(sessions.map((s) => s.close()));
    });
    expect(server.provider.counts.refreshes).toBe(refreshes + 1);
    expect((await stored()).expiresAt).toBeGreaterThan(Date.now());
  });

  it('says to log in again when the authorization server refuses the refresh', async () => {
    server.provider.expireAccessTokens();
    server.provider.revokeRefreshTokens();
    const out = await cli(['inspect', server.url]);
    expect(out.code).toBe(1);
    expect(out.stderr).toMatch(new RegExp(`^mcprl inspect: AUTH_REQUIRED: ${server.url} requires OAuth: run \`mcprl login ${server.url}\` \\(.+\\)\\n$`));
  });

  it('logs in again, and logout removes the login', async () => {
    expect((await login()).code).toBe(0);
    expect((await cli(['inspect', server.url])).code).toBe(0);
    const out = await cli(['logout', server.url]);
    expect(out.code, out.stderr).toBe(0);
    await expect(stat(loginFile(server.url, env))).rejects.toMatchObject({ code: 'ENOENT' });
    const again = await cli(['inspect', server.url]);
    expect(again.stderr).toBe(`mcprl inspect: AUTH_REQUIRED: ${server.url} requires OAuth: run \`mcprl login ${server.url}\`\n`);
  });

  it('logout --all removes every stored login (and temporaries a killed write left)', async () => {
    const dir = join(configDir, 'mcprl', 'oauth');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'a.example-0000000000000000.json'), '{}', { mode: 0o600 });
    await writeFile(join(dir, '.a.example-0000000000000000.json.1.0.tmp'), '{}', { mode: 0o600 });
    const out = await cli(['logout', '--all']);
    expect(out.code, out.stderr).toBe(0);
    expect(await readdir(dir)).toEqual([]);
  });

  it('never printed a token', () => {
    expect(server.provider.issued.length).toBeGreaterThanOrEqual(6);
    for (const token of server.provider.issued) expect(printed).not.toContain(token);
  });

  it('a 401 from a server without OAuth metadata still asks for credentials by --header, and login says why it cannot', async () => {
    const plain = await startPlain401Server();
    try {
      const err = await connect({ kind: 'http', url: plain.url }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(McpConnectError);
      expect((err as McpConnectError).code).toBe('HTTP_ERROR');
      expect((err as Error).message).toContain('--header');
      const out = await cli(['login', plain.url]);
      expect(out.code).toBe(1);
      expect(out.stderr).toBe(`mcprl login: AUTH_FAILED: ${plain.url} does not offer OAuth (no protected-resource or authorization-server metadata)\n`);
    } finally {
      await plain.close();
    }
  });

  it('redacts the stored tokens from an error that quotes them', async () => {
    const echo = await startEchoingServer();
    await inConfigDir(async () => {
      const token = 'at-echoed-0123456789abcdef';
      await saveLogin({
        server: echo.url,
        clientInformation: { client_id: 'c1', redirect_uris: ['http://127.0.0.1:1/callback'] },
        tokens: { access_token: token, token_type: 'Bearer' },
        updatedAt: new Date().toISOString(),
      });
      const err = await connect({ kind: 'http', url: echo.url }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(McpConnectError);
      expect((err as Error).message).toContain('bad request with Bearer [redacted]');
      expect((err as Error).message).not.toContain(token);
    }).finally(() => echo.close());
  });
});

/** `mcprl login` made in this process (no CLI start), the test playing the browser. Runs with process.env's config folder. */
async function loginHere(url: string): Promise<void> {
  let browsed: Promise<void> = Promise.resolve();
  await login(url, {
    onEvent: (e) => {
      if (e.event !== 'authorize') return;
      browsed = (async () => {
        const approved = await fetch(e.url, { redirect: 'manual' });
        await fetch(approved.headers.get('location')!);
      })();
    },
  });
  await browsed;
}

/** The pid of a process that has exited (and been reaped), so nothing runs under it now. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await new Promise((r) => child.once('exit', r));
  return child.pid!;
}

describe('the login lock, refreshes made by mcprl, 401 → refresh → retry, and logout with revocation', () => {
  let server: OAuthMcpServer;
  let configDir: string;
  let previous: string | undefined;
  const stored = () => readLogin(server.url)!;

  beforeAll(async () => {
    server = await startOAuthMcpServer();
    configDir = await mkdtemp(join(tmpdir(), 'mcprl-oauth-lock-'));
    // This block's connections are made here, with the test's config folder (and the child processes inherit it).
    previous = process.env[CONFIG_DIR_ENV];
    process.env[CONFIG_DIR_ENV] = join(configDir, 'mcprl');
    await loginHere(server.url);
  });

  afterAll(async () => {
    if (previous === undefined) delete process.env[CONFIG_DIR_ENV];
    else process.env[CONFIG_DIR_ENV] = previous;
    await server?.close();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  it('two processes that refresh the same login at once: one refresh request reaches the server, both end authorized, the newest tokens are stored', async () => {
    const before = stored();
    const counts = { ...server.provider.counts };
    const gate = server.provider.holdRefreshes();
    const children = [0, 1].map(() => {
      const child = spawn(process.execPath, ['--import', 'tsx', REFRESHER, server.url], { stdio: 'pipe', env: process.env });
      return { child, ...watch(child) };
    });
    try {
      await Promise.all(children.map((c) => c.event('ready')));
      // The barrier: both are released together, and both refresh the access token they loaded.
      for (const c of children) c.child.stdin.write('go\n');
      await gate.arrived(1);
      // One holds the lock and its refresh waits at the gate. The other either waits for the lock (and says so), or —
      // were there no lock — sends its own refresh request, which the gate would see: both end the wait.
      await Promise.race([...children.map((c) => c.event('waiting')), gate.arrived(2)]);
      gate.release();
      const done = await Promise.all(children.map((c) => c.finished));
      for (const d of done) expect(d.code, d.stderr).toBe(0);
      expect(server.provider.counts.refreshRequests).toBe(counts.refreshRequests + 1);
      expect(server.provider.counts.refreshes).toBe(counts.refreshes + 1);
      const after = stored();
      expect(after.tokens.access_token).not.toBe(before.tokens.access_token);
      // The newest tokens: the last the server issued, and valid.
      expect(server.provider.issued.slice(-2)).toEqual([after.tokens.access_token, after.tokens.refresh_token]);
      expect(server.provider.accessTokenValid(after.tokens.access_token)).toBe(true);
      const connected = await Promise.all(children.map((c) => c.event('connected')));
      for (const c of connected) expect(c).toMatchObject({ name: 'mcprl-bookshop', accessToken: after.tokens.access_token });
      expect(existsSync(loginLockFile(server.url))).toBe(false);
    } finally {
      gate.release();
      for (const c of children) c.child.kill();
    }
  });

  it('a lock whose holder is dead, or that is older than LOGIN_LOCK.staleAgeMs, is taken over', async () => {
    const file = loginLockFile(server.url);
    const stale: LockOwner[] = [
      { pid: await deadPid(), start: null, host: hostname(), since: new Date().toISOString() },
      // This very process, alive, but the lock is older than any refresh takes.
      { pid: process.pid, start: processStart(process.pid), host: hostname(), since: new Date(Date.now() - LOGIN_LOCK.staleAgeMs - 60_000).toISOString() },
    ];
    for (const owner of stale) {
      await writeFile(file, JSON.stringify(owner));
      let heldBy: LockOwner | null = null;
      // No wait allowed: a stale lock is taken over at once.
      await withLoginLock(server.url, async () => void (heldBy = readLockFileOwner(file)), { waitMs: 0 });
      expect(heldBy).toMatchObject({ pid: process.pid });
      expect(heldBy).not.toEqual(owner);
      expect(existsSync(file)).toBe(false);
    }
  });

  it('a live lock: LOGIN_LOCKED after the wait, naming the lock file and the holder', async () => {
    const file = loginLockFile(server.url);
    const held = FileLock.tryAcquire(file, LOGIN_LOCK.staleAgeMs);
    if (!(held instanceof FileLock)) throw new Error('the lock was not free');
    try {
      let waits = 0;
      let ran = false;
      const err = await withLoginLock(server.url, async () => void (ran = true), { waitMs: 20, pollMs: 1, onWait: () => waits++ }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(McpConnectError);
      expect((err as McpConnectError).code).toBe('LOGIN_LOCKED');
      expect((err as Error).message).toContain(file);
      expect((err as Error).message).toContain(`pid ${process.pid}`);
      expect(ran).toBe(false);
      expect(waits).toBeGreaterThanOrEqual(1);
    } finally {
      held.release();
    }
    expect(existsSync(file)).toBe(false);
  });

  it('a 401 from the MCP server: one refresh, the request repeated once, and it connects (streamable HTTP and SSE)', async () => {
    for (const url of [server.url, server.sseUrl]) {
      // The SSE endpoint is the same resource server: a login for its URL with this login's registration and tokens.
      if (url === server.sseUrl) await saveLogin({ ...stored(), server: server.sseUrl, updatedAt: new Date().toISOString() });
      server.provider.expireAccessTokens();
      const counts = { ...server.provider.counts };
      const session = await connect({ kind: 'http', url });
      try {
        expect(session.server.name).toBe('mcprl-bookshop');
        expect(session.transportKind).toBe(url === server.sseUrl ? 'sse' : 'streamable-http');
      } finally {
        await session.close();
      }
      expect(server.provider.counts.unauthorized, url).toBe(counts.unauthorized + 1);
      expect(server.provider.counts.refreshRequests, url).toBe(counts.refreshRequests + 1);
      expect(server.provider.accessTokenValid(readLogin(url)!.tokens.access_token)).toBe(true);
    }
    // The SSE login's refresh spent the refresh token the MCP URL's login holds: its tokens go back there.
    await saveLogin({ ...readLogin(server.sseUrl)!, server: server.url, updatedAt: new Date().toISOString() });
    removeLogin(server.sseUrl);
  });

  it('a second 401, to the refreshed token, fails with one clear error', async () => {
    server.provider.refuseAccessTokens = true;
    try {
      const counts = { ...server.provider.counts };
      const err = await connect({ kind: 'http', url: server.url }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(McpConnectError);
      expect((err as McpConnectError).code).toBe('AUTH_REQUIRED');
      expect((err as Error).message).toBe(`${server.url} requires OAuth: run \`mcprl login ${server.url}\` (the server refused the access token even after a refresh)`);
      expect(server.provider.counts.unauthorized).toBe(counts.unauthorized + 2);
      expect(server.provider.counts.refreshRequests).toBe(counts.refreshRequests + 1);
    } finally {
      server.provider.refuseAccessTokens = false;
    }
  });

  it('logout revokes the refresh token, then the access token, and deletes the login: both tokens are then refused', async () => {
    const before = stored();
    const counts = { ...server.provider.counts, revocations: [...server.provider.counts.revocations] };
    const out = await watch(runCli(['logout', server.url], process.env)).finished;
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).toBe('');
    expect(out.stdout).toBe(`logged out of ${server.url} (revoked its tokens, removed ${loginFile(server.url)})\n`);
    expect(server.provider.counts.revocations).toEqual([...counts.revocations, 'refresh_token', 'access_token']);
    expect(existsSync(loginFile(server.url))).toBe(false);
    // The refresh token: invalid_grant at the real token endpoint. The access token: 401 at the MCP endpoint.
    const info = await discoverOAuthServerInfo(server.url);
    const refused = await refreshAuthorization(info.authorizationServerUrl, {
      metadata: info.authorizationServerMetadata,
      clientInformation: before.clientInformation,
      refreshToken: before.tokens.refresh_token!,
      resource: server.url,
    }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidGrantError);
    const res = await fetch(server.url, {
      method: 'POST',
      headers: { authorization: `Bearer ${before.tokens.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    });
    expect(res.status).toBe(401);
  });

  it('a revocation that fails still deletes the login, and one line says the tokens were not revoked', async () => {
    await loginHere(server.url);
    const { tokens } = stored();
    server.provider.failRevocation = true;
    try {
      const out = await watch(runCli(['logout', server.url], process.env)).finished;
      expect(out.code, out.stderr).toBe(0);
      expect(out.stdout).toBe(`logged out of ${server.url} (removed ${loginFile(server.url)})\n`);
      const lines = out.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(new RegExp(`^mcprl logout: the tokens of ${server.url} were not revoked, only deleted here \\(.*HTTP 500.*\\); they stay valid`));
      expect(out.stderr).not.toContain(tokens.refresh_token!);
    } finally {
      server.provider.failRevocation = false;
    }
    expect(existsSync(loginFile(server.url))).toBe(false);
    expect(server.provider.accessTokenValid(tokens.access_token)).toBe(true);
  });

  it('an authorization server without revocation: the login is deleted, and the result says why nothing was revoked', async () => {
    const plain = await startOAuthMcpServer({ revocation: false });
    try {
      await loginHere(plain.url);
      const result = await logout(plain.url);
      expect(result.file).toBe(loginFile(plain.url));
      expect(result.revoked).toEqual([]);
      expect(result.notRevoked).toMatch(/offers no token revocation \(RFC 7009\)/);
      expect(existsSync(loginFile(plain.url))).toBe(false);
    } finally {
      await plain.close();
    }
  });
});
