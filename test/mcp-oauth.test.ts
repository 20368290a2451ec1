/**
 * `mcprl login` against a real OAuth-protected MCP server (test/helpers/oauth-server.ts: the SDK's own authorization
 * server handlers and bearer-auth middleware, tokens issued in memory). The CLI runs as child processes; the test
 * plays the browser by following the authorization URL that `mcprl login --json` reports, and waits only on the
 * CLI's JSON events and exits, never on time (each test has the suite's generous timeout: a loaded machine
 * takes over 10 s per CLI start).
 */
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../src/mcp/session.js';
import { McpConnectError } from '../src/mcp/errors.js';
import { CONFIG_DIR_ENV, loginFile, saveLogin, StoredLoginSchema } from '../src/mcp/oauth-store.js';
import { runCli } from './helpers/cli.js';
import { startEchoingServer, startOAuthMcpServer, startPlain401Server, type OAuthMcpServer } from './helpers/oauth-server.js';

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
