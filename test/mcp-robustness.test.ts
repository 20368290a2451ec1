/**
 * The client against servers that page, crash, hang, flood, break their own schemas, expire HTTP sessions or
 * speak only the legacy SSE transport. All servers are real processes (test/helpers).
 */
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, McpConnectError, McpListError, SafetyPolicy, type McpSession } from '../src/mcp/index.js';
import {
  fixtureStdioTarget,
  isAlive,
  misbehavingStdioTarget,
  pagingStdioTarget,
  startFixtureHttp,
  startSseOnlyServer,
} from './helpers/servers.js';
import { fault } from './faults/fault-table.js';

describe('pagination', () => {
  it('follows nextCursor to the end for tools, resources, resource templates and prompts', async () => {
    const s = await connect(pagingStdioTarget());
    try {
      expect((await s.listTools()).map((t) => t.name)).toEqual(Array.from({ length: 7 }, (_, i) => `tool_${i}`));
      expect((await s.listResources()).map((r) => r.name)).toEqual(Array.from({ length: 5 }, (_, i) => `resource_${i}`));
      expect((await s.listResourceTemplates()).map((r) => r.name)).toEqual(['template_0', 'template_1', 'template_2']);
      expect((await s.listPrompts()).map((p) => p.name)).toEqual(['prompt_0', 'prompt_1', 'prompt_2', 'prompt_3']);
      // A tool on the last page is callable (the catalog holds every page).
      expect((await s.callTool('tool_6', {})).text).toBe('called tool_6');
    } finally {
      await s.close();
    }
  });

  it('stops a cursor that never ends at the page bound with a clear error', async () => {
    const s = await connect(pagingStdioTarget('endless'), { maxPages: 40 });
    try {
      const err = await s.listTools().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(McpListError);
      expect((err as McpListError).code).toBe('TOO_MANY_PAGES');
      expect((err as Error).message).toContain('40 pages');
    } finally {
      await s.close();
    }
  });

  it('stops a cursor that repeats itself at once', async () => {
    const s = await connect(pagingStdioTarget('loop'));
    try {
      const err = await s.listTools().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(McpListError);
      expect((err as McpListError).code).toBe('CURSOR_LOOP');
    } finally {
      await s.close();
    }
  });
});

describe('misbehaving server', () => {
  let s: McpSession;
  beforeAll(async () => {
    // Long enough that a healthy call (or a reconnect) on a loaded machine never hits it; only the hanging tool does.
    s = await connect(misbehavingStdioTarget(), { callTimeoutMs: 8000 });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('reports a crash during a call as a tool error, then reconnects to a new process on the next call', async () => {
    const firstPid = Number((await s.callTool('whoami', {})).text);
    expect(firstPid).toBe(s.pid);
    const crash = await s.callTool('crash', {});
    expect(crash.isError).toBe(true);
    expect(crash.text).toContain("Tool 'crash'");
    expect(crash.text).toContain('connection to the server was lost');
    const again = await s.callTool('whoami', {});
    expect(again.isError).toBe(false);
    const secondPid = Number(again.text);
    expect(secondPid).not.toBe(firstPid);
    expect(isAlive(firstPid)).toBe(false);
    fault('MCP server crashes during a call', 'a tool error, then a new server process', 'tool error "connection to the server was lost"; next call on a new pid');
  });

  it('reconnects when the server process died between calls', async () => {
    const pid = s.pid!;
    process.kill(pid, 'SIGKILL');
    // Wait until the client has seen the process go (the transport's close event), without timing assertions.
    while (s.connected) await new Promise((r) => setTimeout(r, 20));
    expect(isAlive(pid)).toBe(false);
    const r = await s.callTool('whoami', {});
    expect(r.isError).toBe(false);
    expect(Number(r.text)).not.toBe(pid);
    expect((await s.listTools()).length).toBe(9);
  });

  it('times out a hanging tool as a tool error and cancels the request on the server', async () => {
    const r = await s.callTool('hang', {}, { timeoutMs: 300 });
    expect(r.isError).toBe(true);
    expect(r.text).toBe("Tool 'hang' timed out after 300 ms; the call was cancelled.");
    // The session stays usable, and the server saw the notifications/cancelled.
    expect((await s.callTool('cancellations', {})).text).toBe('1');
    fault('MCP tool hangs', 'a tool error after the call timeout; the request cancelled', 'timed out after 300 ms; server saw notifications/cancelled');
  });

  it('returns an aborted call as a tool error', async () => {
    const ac = new AbortController();
    const pending = s.callTool('hang', {}, { signal: ac.signal, timeoutMs: 30_000 });
    setTimeout(() => ac.abort(), 50);
    const r = await pending;
    expect(r.isError).toBe(true);
    expect(r.text).toContain('cancelled');
    expect((await s.callTool('cancellations', {})).text).toBe('2');
  });

  it('caps huge output with a visible marker instead of failing', async () => {
    const r = await s.callTool('huge', { chars: 5_000_000 });
    expect(r.isError).toBe(false);
    expect(r.truncated).toBe(true);
    expect(r.text.startsWith('x'.repeat(20_000))).toBe(true);
    expect(r.text).toContain('showing 20000 of 5000000 characters');
    const small = await s.callTool('huge', { chars: 500 }, { maxChars: 100 });
    expect(small.truncated).toBe(true);
    expect(small.text).toContain('showing 100 of 500 characters');
    expect((await s.callTool('huge', { chars: 500 })).truncated).toBe(false);
    fault('MCP tool returns 5 MB of text', 'capped with a visible marker', 'showing 20000 of 5000000 characters');
  });

  it("returns output that breaks the tool's own outputSchema as a tool error naming the tool", async () => {
    const r = await s.callTool('bad_output', {});
    expect(r.isError).toBe(true);
    expect(r.text).toContain("Tool 'bad_output' returned output that breaks its own outputSchema");
  });

  it('summarises images, audio and binary resources by type and size', async () => {
    const r = await s.callTool('media', {});
    expect(r.text).toBe(
      '[image: image/png, 300 bytes]\n[audio: audio/wav, 1000 bytes]\n[resource: mem://note, text/plain, 6 chars]\na note\n' +
        '[resource: mem://blob, application/octet-stream, 10 bytes]',
    );
  });

  it('answers an unknown tool with the list of real ones', async () => {
    const r = await s.callTool('nope', {});
    expect(r.isError).toBe(true);
    expect(r.text).toContain("Unknown tool 'nope'");
    expect(r.text).toContain('whoami');
  });

  it('refuses an unannotated tool by default (the spec defaults make it possibly destructive)', async () => {
    // Outside isolation any tool that may write is refused first; in isolation, one that may destroy still is.
    const r = await s.callTool('wipe', {});
    expect(r.isError).toBe(true);
    // The model reads what was refused and why; how to enable it is for the operator, apart.
    expect(r.text).toContain("refused tool 'wipe'");
    expect(r.text).not.toContain('--isolate');
    expect(r.refused?.remedy).toContain('--isolate');
    const isolated = await connect(misbehavingStdioTarget(), { isolated: true, stateInMemory: true });
    try {
      const again = await isolated.callTool('wipe', {});
      expect(again.isError).toBe(true);
      expect(again.text).not.toMatch(/--|rerun/i);
      expect(again.refused?.remedy).toContain('--allow wipe');
    } finally {
      await isolated.close();
    }
    expect((await s.listTools()).find((t) => t.name === 'wipe')!.annotations).toEqual({
      readOnlyHint: false,
      destructiveHint: true,
      idempotentHint: false,
      openWorldHint: true,
    });
    fault('a refused tool call, as the model reads it', 'why, and that it is unavailable; no command line to rerun', "the model's text names no option; the remedy goes to the operator's log");
  });
});

describe('safety policy given at connect', () => {
  it('lets an allow-listed tool run and blocks a denied read-only one', async () => {
    const s = await connect(misbehavingStdioTarget(), { policy: new SafetyPolicy({ allow: ['wipe'], deny: ['peek'] }), isolated: true, stateInMemory: true });
    try {
      expect(await s.callTool('wipe', {})).toMatchObject({ isError: false, text: 'wiped' });
      const peek = await s.callTool('peek', {});
      expect(peek.isError).toBe(true);
      expect(peek.text).toContain('the operator denied it');
      expect(peek.refused?.remedy).toContain('deny list');
    } finally {
      await s.close();
    }
  });
});

describe('lifecycle', () => {
  it('close() leaves no child process behind', async () => {
    const s = await connect(fixtureStdioTarget());
    const pid = s.pid!;
    expect(isAlive(pid)).toBe(true);
    await s.close();
    expect(isAlive(pid)).toBe(false);
  });

  it('a failed connect (server exits during initialize) leaves no child either and says why', async () => {
    const err = await connect({
      kind: 'stdio',
      command: process.execPath,
      args: ['-e', 'console.error("fatal: missing API key"); process.exit(2)'],
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(McpConnectError);
    expect((err as McpConnectError).code).toBe('SERVER_EXITED');
    expect((err as Error).message).toContain('fatal: missing API key');
  });

  it('a server that answers with garbage instead of JSON-RPC fails the connect with a clear error, and is stopped', async () => {
    // Every line it reads is answered with a line that is not JSON-RPC (nor JSON); it writes its pid to a file.
    const pidFile = join(tmpdir(), `mcprl-garbage-${process.pid}.pid`);
    const script = "require('fs').writeFileSync(process.env.PID_FILE, String(process.pid)); process.stdin.on('data', () => process.stdout.write('<html>garbage</html>\\n{oops\\n')); setInterval(() => {}, 1000);";
    const err = await connect({ kind: 'stdio', command: process.execPath, args: ['-e', script], env: { PID_FILE: pidFile } }, { timeoutMs: 1500 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(McpConnectError);
    expect((err as McpConnectError).code).toBe('TIMEOUT');
    expect((err as Error).message).toMatch(/initialize/);
    const pid = Number(readFileSync(pidFile, 'utf8'));
    rmSync(pidFile);
    expect(pid).toBeGreaterThan(0);
    // The teardown that follows the failure stops it (a polite close first, then signals): wait for it to go.
    const running = () => {
      try {
        return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
      } catch {
        return false;
      }
    };
    for (let i = 0; i < 200 && running(); i++) await new Promise((r) => setTimeout(r, 50));
    expect(running()).toBe(false);
    fault('MCP server writes garbage instead of JSON-RPC', 'connect fails with a clear error; the process is stopped', `${(err as McpConnectError).code} after 1500 ms; the server process then stopped`);
  });

  it('passes PATH and the target env to a stdio server, but not other variables of ours', async () => {
    process.env.MCPRL_TEST_SECRET = 'do-not-leak';
    try {
      const s = await connect({
        kind: 'stdio',
        command: process.execPath,
        args: ['-e', 'process.stderr.write(JSON.stringify({p: !!process.env.PATH, x: process.env.EXTRA, s: process.env.MCPRL_TEST_SECRET ?? null}) + "\\n"); process.exit(1)'],
        env: { EXTRA: 'yes' },
      }).catch((e: unknown) => e);
      expect((s as Error).message).toContain('{"p":true,"x":"yes","s":null}');
    } finally {
      delete process.env.MCPRL_TEST_SECRET;
    }
  });

  it('reconnects when the HTTP session has expired (server restarted on the same port)', async () => {
    let server = await startFixtureHttp();
    const port = server.port;
    const s = await connect({ kind: 'http', url: server.url }, { policy: new SafetyPolicy({ allowUnisolatedWrites: true }) });
    try {
      expect((await s.callTool('restock', { book_id: 'bk-001', quantity: 1 })).isError).toBe(false);
      await server.stop();
      server = await startFixtureHttp({ port });
      // The new process knows nothing of the old session: 404, a new session, and a fresh seeded state.
      const r = await s.callTool('check_stock', { book_id: 'bk-001' });
      expect(r.isError).toBe(false);
      expect(JSON.parse(r.text).stock).toBe(1);
      expect(s.transportKind).toBe('streamable-http');
    } finally {
      await s.close();
      await server.stop();
    }
  });

  it('throws McpConnectError when the HTTP server is gone for good', async () => {
    const server = await startFixtureHttp();
    const s = await connect({ kind: 'http', url: server.url });
    await server.stop();
    try {
      const err = await s.listTools().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(McpConnectError);
      expect((err as McpConnectError).code).toBe('UNREACHABLE');
    } finally {
      await s.close();
    }
  });
});

describe('SSE fallback', () => {
  it('falls back to the legacy SSE transport when the initialize POST gets a 4xx', async () => {
    const server = await startSseOnlyServer();
    const s = await connect({ kind: 'http', url: server.url, headers: { 'X-Test': '1' } });
    try {
      expect(s.transportKind).toBe('sse');
      expect(s.server.name).toBe('mcprl-bookshop');
      expect((await s.listTools()).length).toBe(9);
      const r = await s.callTool('get_book', { book_id: 'bk-001' });
      expect(r.isError).toBe(false);
      expect(r.structuredContent).toMatchObject({ id: 'bk-001' });
    } finally {
      await s.close();
      await server.stop();
    }
  });
});
