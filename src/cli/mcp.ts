/**
 * `mcprl mcp`: mcprl itself as an MCP server (stdio by default, streamable HTTP with --http PORT), so assistants
 * and IDEs can inspect a server, train on it, watch the run, evaluate, run the trained agent and export it.
 */
import type { Command } from 'commander';
import { SafetyPolicy } from '../mcp/index.js';
import { createContext } from '../mcp-server/server.js';
import { serveHttp, serveStdio } from '../mcp-server/serve.js';
import { Workspace } from '../mcp-server/workspace.js';
import { numberParser } from './parse-number.js';

interface McpCliOptions {
  workspace: string;
  models?: string[];
  http?: number;
  host: string;
  token?: string;
  tokenEnv?: string;
  allowedHost?: string[];
  allowDestructive?: boolean;
  allow?: string[];
  deny?: string[];
}

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

export function registerMcp(program: Command): Command {
  const cmd = program
    .command('mcp')
    .description('run mcprl as an MCP server (tools: inspect, scenarios, training, evaluation, the trained agent, export)')
    .option('--workspace <dir>', 'the only folder the server reads and writes: runs, scenarios, evals, exports', 'runs')
    .option('--models <dir>', 'extra read-only folder base models may be loaded from (repeatable)', collect)
    .option('--http <port>', 'serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (0: any free port)', numberParser({ integer: true, min: 0, max: 65535 }))
    .option('--host <host>', 'address to bind with --http; anything but loopback requires --token', '127.0.0.1')
    .option('--token <token>', 'bearer token every HTTP request must carry (prefer --token-env: argv is visible to other users)')
    .option('--token-env <var>', 'environment variable holding the bearer token')
    .option('--allowed-host <name>', 'extra host name the Host header may carry with --http (repeatable)', collect)
    .option('--allow-destructive', "let target tools that may be destructive run (refused by default)")
    .option('--allow <tool>', 'let this target tool run whatever its annotations say; * is a wildcard (repeatable)', collect)
    .option('--deny <tool>', 'never run this target tool; * is a wildcard (repeatable)', collect);
  cmd.addHelpText(
    'after',
    `
Register it with an MCP client (mcpServers config):
  {"mcpServers": {"mcprl": {"command": "npx", "args": ["mcprl", "mcp", "--workspace", "/abs/runs"]}}}
Over HTTP:
  MCPRL_TOKEN=… mcprl mcp --http 8765 --token-env MCPRL_TOKEN --workspace runs`,
  );
  cmd.action(async (o: McpCliOptions) => {
    try {
      const token = o.tokenEnv !== undefined ? process.env[o.tokenEnv] : o.token;
      if (o.tokenEnv !== undefined && !token) throw new Error(`--token-env ${o.tokenEnv}: that environment variable is empty or unset`);
      if (token !== undefined && o.http === undefined) throw new Error('--token applies to --http only (stdio needs none)');
      const workspace = new Workspace(o.workspace, o.models ?? []);
      const safety = new SafetyPolicy({ allowDestructive: o.allowDestructive ?? false, allow: o.allow ?? [], deny: o.deny ?? [] });
      const ctx = createContext(workspace, safety);
      if (o.http === undefined) {
        await serveStdio(ctx);
        return;
      }
      const { url, close } = await serveHttp(ctx, { port: o.http, host: o.host, token, allowedHosts: o.allowedHost });
      // Logs go to stderr; only names and addresses, never the token.
      process.stderr.write(`mcprl mcp: listening on ${url} (workspace ${workspace.root}${token ? ', bearer token required' : ''})\n`);
      const shutdown = () => void close().finally(() => process.exit(0));
      process.on('SIGINT', shutdown);
      process.on('SIGTERM', shutdown);
    } catch (err) {
      const e = err as { code?: string; message?: string };
      process.stderr.write(`mcprl mcp: ${e.code ? `${e.code}: ` : ''}${(e.message ?? String(err)).replace(/\s+/g, ' ').trim()}\n`);
      process.exitCode = 1;
    }
  });
  return cmd;
}
