/**
 * The target options shared by every command that talks to an MCP server (inspect, scenarios, eval, train).
 *
 *   mcprl <cmd> https://example.com/mcp [--header 'Authorization: Bearer …']
 *   mcprl <cmd> [options] -- node server.js --flag        (stdio: everything after -- is the command)
 *   mcprl <cmd> --config mcp.json --server bookshop
 */
import type { Command } from 'commander';
import { targetFromConfigFile } from '../mcp/config.js';
import { McpConnectError } from '../mcp/errors.js';
import { SafetyPolicy } from '../mcp/policy.js';
import { IsolationSchema, SANDBOX_PLACEHOLDER, type Isolation } from '../mcp/sandbox.js';
import type { ConnectOptions } from '../mcp/session.js';
import type { Target } from '../mcp/types.js';
import { numberParser } from './parse-number.js';

/** The options `addTargetOptions` defines, as commander parses them. */
export interface TargetCliOptions {
  config?: string;
  server?: string;
  header?: string[];
  timeout?: number;
  allowDestructive?: boolean;
  allow?: string[];
  deny?: string[];
  allowUnisolatedWrites?: boolean;
  isolate?: boolean;
  sandboxFrom?: string;
  stateInMemory?: boolean;
}

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

/** Adds the target and safety-policy options to `cmd`. The command itself declares its `[target...]` argument. */
export function addTargetOptions(cmd: Command): Command {
  return cmd
    .option('--config <file>', 'MCP client config file in the mcpServers JSON shape')
    .option('--server <name>', 'server to use from --config (optional when the file has exactly one)')
    .option('--header <header>', "HTTP header for URL targets, 'Name: value' (repeatable)", collect)
    .option('--timeout <ms>', 'connect/initialize timeout in milliseconds (default 30000)', numberParser({ integer: true, above: 0, unit: 'milliseconds' }))
    .option('--allow-destructive', 'let tools that may be destructive run (refused by default)')
    .option('--allow <tool>', 'let this tool run whatever its annotations say; * is a wildcard (repeatable)', collect)
    .option('--deny <tool>', 'never run this tool; * is a wildcard (repeatable)', collect)
    .option('--isolate', `a fresh stdio server per rollout, each with its own ${SANDBOX_PLACEHOLDER} directory; tools that write run only then, and only when the target keeps its state in ${SANDBOX_PLACEHOLDER} (or --state-in-memory)`)
    .option('--sandbox-from <dir>', `copy this folder into every ${SANDBOX_PLACEHOLDER} (write ${SANDBOX_PLACEHOLDER} in the server's command, args, env or cwd)`)
    .option('--state-in-memory', `the server keeps its state in memory only (nothing on disk): with --isolate its tools that write run without a ${SANDBOX_PLACEHOLDER}`)
    .option('--allow-unisolated-writes', "let tools that write run without isolation: they change the server's real data");
}

function parseHeaders(raw: string[] | undefined): Record<string, string> | undefined {
  if (!raw?.length) return undefined;
  const headers: Record<string, string> = {};
  for (const h of raw) {
    const i = h.indexOf(':');
    const name = i > 0 ? h.slice(0, i).trim() : '';
    if (!name || /\s/.test(name)) {
      throw new McpConnectError('CONFIG', `--header must look like 'Name: value', got ${JSON.stringify(h)}`);
    }
    headers[name] = h.slice(i + 1).trim();
  }
  return headers;
}

/**
 * The target described by a command's positional arguments and options: one http(s) URL, or a command (the
 * words after `--`), or `--config FILE [--server NAME]`. Throws McpConnectError('CONFIG') when it is
 * missing, ambiguous or malformed.
 */
export function targetFromCli(args: string[], opts: TargetCliOptions): Target {
  const headers = parseHeaders(opts.header);
  let target: Target;
  if (opts.config !== undefined) {
    if (args.length) {
      throw new McpConnectError('CONFIG', `give either --config or a target on the command line, not both (got ${args.join(' ')})`);
    }
    target = targetFromConfigFile(opts.config, opts.server);
  } else if (opts.server !== undefined) {
    throw new McpConnectError('CONFIG', '--server needs --config FILE');
  } else if (args.length === 0) {
    throw new McpConnectError('CONFIG', 'no MCP server given: pass an http(s) URL, a command after --, or --config FILE --server NAME');
  } else if (/^https?:\/\//i.test(args[0])) {
    if (args.length > 1) throw new McpConnectError('CONFIG', `a URL target takes no further arguments (got ${args.slice(1).join(' ')})`);
    try {
      new URL(args[0]);
    } catch {
      throw new McpConnectError('CONFIG', `not a valid URL: ${args[0]}`);
    }
    target = { kind: 'http', url: args[0] };
  } else {
    target = { kind: 'stdio', command: args[0], args: args.slice(1) };
  }
  if (headers) {
    if (target.kind !== 'http') throw new McpConnectError('CONFIG', '--header applies to http(s) URL targets only');
    target = { ...target, headers: { ...target.headers, ...headers } };
  }
  return target;
}

/** The safety policy from --allow-destructive, --allow, --deny and --allow-unisolated-writes. */
export function policyFromCli(opts: TargetCliOptions): SafetyPolicy {
  return new SafetyPolicy({ allowDestructive: opts.allowDestructive, allow: opts.allow, deny: opts.deny, allowUnisolatedWrites: opts.allowUnisolatedWrites });
}

/** Isolation from --isolate, --sandbox-from and --state-in-memory. */
export function isolationFromCli(opts: TargetCliOptions): Isolation {
  return IsolationSchema.parse({ isolate: opts.isolate, sandboxFrom: opts.sandboxFrom, stateInMemory: opts.stateInMemory });
}

/** ConnectOptions for the one session a command holds (timeout, policy, sandbox source, in-memory declaration). */
export function connectOptionsFromCli(opts: TargetCliOptions): ConnectOptions {
  const connect: ConnectOptions = { policy: policyFromCli(opts) };
  if (opts.timeout !== undefined) connect.timeoutMs = opts.timeout;
  if (opts.sandboxFrom !== undefined) connect.sandboxFrom = opts.sandboxFrom;
  if (opts.stateInMemory) connect.stateInMemory = true;
  return connect;
}
