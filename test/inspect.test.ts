/** `mcprl inspect` as a user runs it: a child process, real servers, exit status and output. */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVERYTHING_MAIN, FIXTURE_SERVER_MAIN, freePort, REPO_ROOT, startFixtureHttp, type RunningHttpServer } from './helpers/servers.js';

const ENTRY = path.join(REPO_ROOT, 'src', 'cli', 'entry.ts');

function mcprl(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', ENTRY, ...args], { cwd: REPO_ROOT });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const fixtureCmd = ['--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];

describe('mcprl inspect', () => {
  let http: RunningHttpServer;
  beforeAll(async () => {
    http = await startFixtureHttp();
  });
  afterAll(async () => {
    await http?.stop();
  });

  it('--json over stdio prints the server, the full tool catalog, resources, templates and prompts', async () => {
    const r = await mcprl(['inspect', '--json', ...fixtureCmd]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(Object.keys(report)).toEqual(['server', 'tools', 'resources', 'resourceTemplates', 'prompts', 'policy']);
    expect(report.server).toMatchObject({ name: 'mcprl-bookshop', version: '1.0.0' });
    expect(report.tools).toHaveLength(9);
    expect(report.tools.find((t: { name: string }) => t.name === 'cancel_order').annotations).toEqual({
      readOnlyHint: false,
      destructiveHint: true,
      idempotentHint: true,
      openWorldHint: false,
    });
    expect(report.resources).toHaveLength(2);
    expect(report.resourceTemplates).toHaveLength(1);
    expect(report.prompts).toHaveLength(1);
  });

  it('--json over HTTP gives the same catalog as over stdio', async () => {
    const [overHttp, overStdio] = await Promise.all([mcprl(['inspect', '--json', http.url]), mcprl(['inspect', '--json', ...fixtureCmd])]);
    expect(overHttp.code).toBe(0);
    expect(JSON.parse(overHttp.stdout).tools).toEqual(JSON.parse(overStdio.stdout).tools);
  });

  it('prints a readable table by default', async () => {
    const r = await mcprl(['inspect', http.url]);
    expect(r.code).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines[0]).toMatch(/^mcprl-bookshop 1\.0\.0 \(MCP protocol \d{4}-\d{2}-\d{2}\)$/);
    expect(r.stdout).toMatch(/^NAME\s+ACCESS\s+AGENT\s+REQUIRED ARGS\s+DESCRIPTION$/m);
    expect(r.stdout).toMatch(/^cancel_order\s+destructive\s+refused\s+order_id\s+Cancel a placed order/m);
    expect(r.stdout).toMatch(/^place_order\s+write\s+refused\s+customer, items\s+/m);
    expect(r.stdout).toMatch(/^get_book\s+read-only\s+runs\s+book_id\s+/m);
    expect(r.stdout).toContain('bookshop://books/{book_id}');
    expect(r.stdout).toContain('recommend_books(genre)');
  });

  it('--isolate and the policy options change what an agent may call (the AGENT column, and policy in --json)', async () => {
    // The fixture keeps its state in memory: with a fresh process per rollout, each rollout's state is its own.
    const isolated = await mcprl(['inspect', '--isolate', '--state-in-memory', ...fixtureCmd]);
    expect(isolated.code).toBe(0);
    expect(isolated.stdout).toMatch(/^place_order\s+write\s+runs\s+/m);
    expect(isolated.stdout).toMatch(/^cancel_order\s+destructive\s+refused\s+/m);
    const destructive = await mcprl(['inspect', '--isolate', '--state-in-memory', '--allow-destructive', '--deny', 'get_book', ...fixtureCmd]);
    expect(destructive.stdout).toMatch(/^cancel_order\s+destructive\s+runs\s+/m);
    expect(destructive.stdout).toMatch(/^get_book\s+read-only\s+refused\s+/m);
    const json = JSON.parse((await mcprl(['inspect', '--json', ...fixtureCmd])).stdout) as { policy: { name: string; allowed: boolean; remedy?: string }[] };
    expect(json.policy.find((p) => p.name === 'place_order')).toMatchObject({ allowed: false, remedy: expect.stringMatching(/--isolate/) });
    expect(json.policy.find((p) => p.name === 'get_book')).toEqual({ name: 'get_book', allowed: true });
  });

  it('reads --config FILE --server NAME in the mcpServers shape', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-inspect-'));
    const file = path.join(dir, 'mcp.json');
    writeFileSync(
      file,
      JSON.stringify({
        mcpServers: {
          bookshop: { command: process.execPath, args: ['--import', 'tsx', FIXTURE_SERVER_MAIN], cwd: REPO_ROOT },
          remote: { url: http.url, headers: { Authorization: 'Bearer x' } },
        },
      }),
    );
    const a = await mcprl(['inspect', '--json', '--config', file, '--server', 'bookshop']);
    expect(a.code).toBe(0);
    expect(JSON.parse(a.stdout).tools).toHaveLength(9);
    const b = await mcprl(['inspect', '--json', '--config', file, '--server', 'remote']);
    expect(b.code).toBe(0);
    const c = await mcprl(['inspect', '--config', file, '--server', 'nope']);
    expect(c.code).toBe(1);
    expect(c.stderr).toBe(`mcprl inspect: CONFIG: no server named 'nope' in ${file} (it has: bookshop, remote)\n`);
  });

  it('lists server-everything with annotations', async () => {
    const r = await mcprl(['inspect', '--json', '--', process.execPath, EVERYTHING_MAIN]);
    expect(r.code).toBe(0);
    const tools = JSON.parse(r.stdout).tools;
    expect(tools.find((t: { name: string }) => t.name === 'echo').annotations.readOnlyHint).toBe(true);
  });

  describe.concurrent('fails with exit status 1 and one line naming the cause', () => {
    const expectOneLine = (r: { code: number | null; stdout: string; stderr: string }, pattern: RegExp) => {
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr.endsWith('\n')).toBe(true);
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(pattern);
    };

    it('for an unreachable URL', async () => {
      const port = await freePort();
      expectOneLine(await mcprl(['inspect', `http://127.0.0.1:${port}/mcp`]), /^mcprl inspect: UNREACHABLE: cannot reach .*connection refused/);
    });

    it('for a missing command', async () => {
      expectOneLine(await mcprl(['inspect', '--', 'mcprl-no-such-command-xyz']), /^mcprl inspect: COMMAND_NOT_FOUND: command not found: mcprl-no-such-command-xyz$/m);
    });

    it('for a server that exits during initialize', async () => {
      const r = await mcprl(['inspect', '--', process.execPath, '-e', 'console.error("config error: no API key\\nmore detail"); process.exit(3)']);
      expectOneLine(r, /^mcprl inspect: SERVER_EXITED: .*exited during initialize: config error: no API key \| more detail$/m);
    });

    it('for a timeout', async () => {
      const r = await mcprl(['inspect', '--timeout', '1000', '--', process.execPath, '-e', 'setInterval(() => {}, 1000)']);
      expectOneLine(r, /^mcprl inspect: TIMEOUT: .*did not complete initialize within 1000 ms$/m);
    });

    it('for no target at all', async () => {
      expectOneLine(await mcprl(['inspect']), /^mcprl inspect: CONFIG: no MCP server given/);
    });
  });
});
