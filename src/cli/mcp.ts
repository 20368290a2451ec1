/**
 * `mcprl mcp`: mcprl itself as an MCP server (stdio by default, streamable HTTP with --http PORT), so assistants
 * and IDEs can inspect a server, train on it, watch the run, evaluate, run the trained agent and export it.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { chooseDevice, DeviceOptionsSchema, type Device } from '../engine/device.js';
import { SafetyPolicy } from '../mcp/index.js';
import { parseKeyGrant, type KeyGrant } from '../mcp-server/api-keys.js';
import { createContext } from '../mcp-server/server.js';
import { serveHttp, serveStdio } from '../mcp-server/serve.js';
import { Workspace } from '../mcp-server/workspace.js';
import { checkToken } from '../util/http-guard.js';
import { numberParser } from './parse-number.js';
import { addSchemaOptions } from './schema-options.js';
import { addGuardOptions } from './server-process.js';

interface McpCliOptions {
  workspace: string;
  models?: string[];
  http?: number;
  host: string;
  token?: string;
  tokenEnv?: string;
  allowedHost?: string[];
  allowedOrigin?: string[];
  allowCommands?: boolean;
  allowKeyEnv?: KeyGrant[];
  allowDestructive?: boolean;
  allow?: string[];
  deny?: string[];
  allowUnisolatedWrites?: boolean;
  device?: Device;
}

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

function collectGrant(value: string, previous: KeyGrant[] = []): KeyGrant[] {
  try {
    return [...previous, parseKeyGrant(value)];
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

export function registerMcp(program: Command): Command {
  const cmd = program
    .command('mcp')
    .description('run mcprl as an MCP server (tools: inspect, scenarios, training, evaluation, the trained agent, export)')
    .option('--workspace <dir>', 'the only folder the server reads and writes: runs, scenarios, evals, exports', 'runs')
    .option('--models <dir>', 'extra read-only folder base models may be loaded from (repeatable)', collect)
    .option('--http <port>', 'serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (0: any free port)', numberParser({ integer: true, min: 0, max: 65535 }))
    .option('--host <host>', 'address to bind with --http; anything but loopback requires --token', '127.0.0.1')
    .option('--token <token>', 'bearer token every HTTP request must carry (prefer --token-env: argv is visible to other users)')
    .option('--token-env <var>', 'environment variable holding the bearer token');
  addGuardOptions(cmd, 'with --http: ');
  cmd
    .option('--allow-commands', 'with --http: let clients give stdio targets, i.e. run commands on this machine (off by default)')
    .option(
      '--allow-key-env <VAR=BASE_URL>',
      'let clients name environment variable VAR as an LLM API key, sent only to base URLs under BASE_URL (repeatable; OPENAI_API_KEY=https://api.openai.com/ is always granted)',
      collectGrant,
    )
    .option('--allow-destructive', "let target tools that may be destructive run (refused by default)")
    .option('--allow <tool>', 'let this target tool run whatever its annotations say; * is a wildcard (repeatable)', collect)
    .option('--deny <tool>', 'never run this target tool; * is a wildcard (repeatable)', collect)
    .option('--allow-unisolated-writes', "let target tools that write run outside isolation (the tools' isolate argument): they change the target's real data");
  addSchemaOptions(cmd, DeviceOptionsSchema);
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
      if (token !== undefined) checkToken(token);
      if (token !== undefined && o.http === undefined) throw new Error('--token applies to --http only (stdio needs none)');
      if ((o.allowCommands || o.allowedOrigin) && o.http === undefined) throw new Error('--allow-commands and --allowed-origin apply to --http only (over stdio the client starts mcprl itself)');
      const grants = o.allowKeyEnv ?? [];
      const leaked = grants.find((g) => g.env === o.tokenEnv);
      if (leaked) throw new Error(`--allow-key-env ${leaked.env}: that variable holds this server's own bearer token`);
      const workspace = new Workspace(o.workspace, o.models ?? []);
      const safety = new SafetyPolicy({ allowDestructive: o.allowDestructive, allow: o.allow, deny: o.deny, allowUnisolatedWrites: o.allowUnisolatedWrites, remedyFor: 'mcp' });
      // Over stdio the client is whoever started mcprl, who can run commands anyway; over HTTP it may be anyone with the token.
      // A device that cannot run is refused before the server starts, naming what is missing.
      if (o.device !== undefined) chooseDevice(o.device);
      const ctx = createContext(workspace, safety, { allowCommands: o.http === undefined || o.allowCommands === true, keyGrants: grants, ...(o.device !== undefined ? { device: o.device } : {}) });
      if (o.http === undefined) {
        await serveStdio(ctx);
        return;
      }
      const { url, close } = await serveHttp(ctx, { port: o.http, host: o.host, token, allowedHosts: o.allowedHost, allowedOrigins: o.allowedOrigin });
      // Logs go to stderr; only names and addresses, never the token.
      const notes = [`workspace ${workspace.root}`, ...(token ? ['bearer token required'] : []), ...(ctx.allowCommands ? ['clients may run commands'] : [])];
      process.stderr.write(`mcprl mcp: listening on ${url} (${notes.join(', ')})\n`);
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
