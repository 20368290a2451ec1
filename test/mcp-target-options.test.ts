/** The shared target options: URL vs command vs --config, headers, and the policy flags. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { addTargetOptions, connectOptionsFromCli, isolationFromCli, policyFromCli, targetFromCli, type TargetCliOptions } from '../src/cli/target-options.js';
import { createSandbox, McpConnectError, sandboxTarget, targetUsesSandbox, toToolInfo } from '../src/mcp/index.js';

function parse(argv: string[]): { args: string[]; opts: TargetCliOptions } {
  let got: { args: string[]; opts: TargetCliOptions } | undefined;
  const program = new Command().exitOverride();
  const cmd = program.command('x').argument('[target...]');
  addTargetOptions(cmd).action((args: string[], opts: TargetCliOptions) => {
    got = { args, opts };
  });
  program.parse(['node', 'mcprl', 'x', ...argv]);
  return got!;
}

const configError = (fn: () => unknown, pattern: RegExp) => {
  let err: unknown;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(McpConnectError);
  expect((err as McpConnectError).code).toBe('CONFIG');
  expect((err as Error).message).toMatch(pattern);
};

describe('targetFromCli', () => {
  it('reads a URL with repeatable headers', () => {
    const { args, opts } = parse(['https://example.com/mcp', '--header', 'Authorization: Bearer abc', '--header', 'X-A:1']);
    expect(targetFromCli(args, opts)).toEqual({
      kind: 'http',
      url: 'https://example.com/mcp',
      headers: { Authorization: 'Bearer abc', 'X-A': '1' },
    });
  });

  it('reads the command after -- verbatim, options included', () => {
    const { args, opts } = parse(['--timeout', '5000', '--', 'node', 'server.js', '--http', '0']);
    expect(targetFromCli(args, opts)).toEqual({ kind: 'stdio', command: 'node', args: ['server.js', '--http', '0'] });
    expect(connectOptionsFromCli(opts).timeoutMs).toBe(5000);
  });

  it('reads --config/--server in the mcpServers shape, resolving cwd against the file', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-config-'));
    const file = path.join(dir, 'mcp.json');
    writeFileSync(
      file,
      JSON.stringify({
        mcpServers: {
          local: { command: 'node', args: ['s.js'], env: { API_KEY: 'k' }, cwd: 'sub' },
          remote: { url: 'http://127.0.0.1:1/mcp', headers: { A: 'b' } },
        },
      }),
    );
    expect(targetFromCli([], parse(['--config', file, '--server', 'local']).opts)).toEqual({
      kind: 'stdio',
      command: 'node',
      args: ['s.js'],
      env: { API_KEY: 'k' },
      cwd: path.join(dir, 'sub'),
    });
    expect(targetFromCli([], parse(['--config', file, '--server', 'remote', '--header', 'C: d']).opts)).toEqual({
      kind: 'http',
      url: 'http://127.0.0.1:1/mcp',
      headers: { A: 'b', C: 'd' },
    });
    configError(() => targetFromCli([], parse(['--config', file]).opts), /has 2 servers; choose one with --server \(local, remote\)/);
    writeFileSync(file, JSON.stringify({ servers: {} }));
    configError(() => targetFromCli([], parse(['--config', file, '--server', 'x']).opts), /not in the mcpServers shape/);
  });

  it('rejects missing, ambiguous and malformed targets with a CONFIG error', () => {
    configError(() => targetFromCli([], {}), /no MCP server given/);
    configError(() => targetFromCli(['http://a/mcp', 'extra'], {}), /takes no further arguments/);
    configError(() => targetFromCli(['node'], { header: ['A: b'] }), /--header applies to http/);
    configError(() => targetFromCli(['http://a/mcp'], { header: ['no colon'] }), /Name: value/);
    configError(() => targetFromCli(['node'], { server: 'x' }), /--server needs --config/);
  });
});

describe('policyFromCli', () => {
  const destructive = toToolInfo({ name: 'drop_table', inputSchema: { type: 'object' } });
  it('maps --allow-destructive, --allow and --deny onto SafetyPolicy', () => {
    const isolated = { isolated: true };
    expect(policyFromCli(parse([]).opts).check(destructive, isolated).allowed).toBe(false);
    expect(policyFromCli(parse(['--allow-destructive']).opts).check(destructive, isolated).allowed).toBe(true);
    expect(policyFromCli(parse(['--allow', 'drop_*']).opts).check(destructive, isolated).allowed).toBe(true);
    expect(policyFromCli(parse(['--allow-destructive', '--deny', 'drop_table']).opts).check(destructive, isolated).allowed).toBe(false);
  });

  it('refuses writes outside isolation unless --allow-unisolated-writes', () => {
    expect(policyFromCli(parse(['--allow-destructive']).opts).check(destructive).allowed).toBe(false);
    expect(policyFromCli(parse(['--allow-destructive', '--allow-unisolated-writes']).opts).check(destructive).allowed).toBe(true);
  });
});

describe('isolation options', () => {
  it('--isolate and --sandbox-from reach the rollouts, and the sandbox source the one session a command holds', () => {
    const { opts } = parse(['--isolate', '--sandbox-from', 'seed', '--', 'node', 's.js', '{sandbox}']);
    expect(isolationFromCli(opts)).toEqual({ isolate: true, sandboxFrom: 'seed', stateInMemory: false });
    expect(connectOptionsFromCli(opts).sandboxFrom).toBe('seed');
    expect(isolationFromCli(parse([]).opts)).toEqual({ isolate: false, stateInMemory: false });
    const inMemory = parse(['--isolate', '--state-in-memory', '--', 'node', 's.js']).opts;
    expect(isolationFromCli(inMemory)).toEqual({ isolate: true, stateInMemory: true });
    expect(connectOptionsFromCli(inMemory).stateInMemory).toBe(true);
  });

  it('{sandbox} in a --config entry (args, env, cwd) is found and replaced everywhere', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-config-'));
    const file = path.join(dir, 'mcp.json');
    writeFileSync(file, JSON.stringify({ mcpServers: { memory: { command: 'mcp-server-memory', env: { MEMORY_FILE_PATH: '{sandbox}/memory.jsonl' } } } }));
    const target = targetFromCli([], parse(['--config', file]).opts);
    expect(targetUsesSandbox(target)).toBe(true);
    expect(sandboxTarget(target, '/tmp/box')).toMatchObject({ env: { MEMORY_FILE_PATH: '/tmp/box/memory.jsonl' } });
    const fs = targetFromCli(['node', 'fs.js', '{sandbox}', '--root={sandbox}/a'], {});
    expect(sandboxTarget(fs, '/b')).toEqual({ kind: 'stdio', command: 'node', args: ['fs.js', '/b', '--root=/b/a'] });
    expect(targetUsesSandbox(targetFromCli(['node', 'plain.js'], {}))).toBe(false);
  });

  it('a --sandbox-from that is no folder is a SANDBOX_FROM error naming it', async () => {
    const missing = path.join(tmpdir(), 'mcprl-no-such-folder-for-sandbox');
    await expect(createSandbox(missing)).rejects.toMatchObject({ code: 'SANDBOX_FROM', message: expect.stringContaining(missing) });
  });
});
