/**
 * `mcprl login <url>`: an OAuth login to a remote MCP server, kept in the user's config folder for every later
 * command that connects to that URL (`mcprl logout` removes it).
 */
import type { Command } from 'commander';
import { McpConnectError } from '../mcp/errors.js';
import { DEFAULT_LOGIN_TIMEOUT_MS, login, type LoginEvent } from '../mcp/oauth-login.js';
import { LOGIN_LOCK } from '../mcp/oauth-store.js';
import { connect } from '../mcp/session.js';
import { oneLineError } from './inspect.js';
import { numberParser } from './parse-number.js';

interface LoginCliOptions {
  redirectPort?: number;
  scope?: string;
  timeout?: number;
  json?: boolean;
}

/** What `mcprl login --json` prints, one JSON object per line: the flow's events, then the check that it works. */
type LoginCliEvent = LoginEvent | { event: 'connected'; name: string; version: string };

function render(e: LoginCliEvent): string {
  switch (e.event) {
    case 'listening':
      return `waiting for the authorization at ${e.redirectUrl}`;
    case 'authorize':
      return `Open this URL in a browser to log in:\n\n  ${e.url}\n`;
    case 'authorized':
      return `logged in to ${e.server}; the login is kept in ${e.file}`;
    case 'connected':
      return `connected to ${e.name} ${e.version} with it`;
  }
}

/** The one stderr line of a failed login or logout, with the error's code. */
export function fail(command: string, err: unknown): void {
  const kind = err instanceof McpConnectError ? `${err.code}: ` : '';
  process.stderr.write(`mcprl ${command}: ${kind}${oneLineError(err)}\n`);
  process.exitCode = 1;
}

export function registerLogin(program: Command): Command {
  const cmd = program
    .command('login')
    .description('log in to a remote MCP server that wants OAuth; later commands connect to that URL with the login')
    .argument('<url>', "the MCP server's http(s) URL, as later commands will be given it")
    .option('--redirect-port <port>', 'port of the redirect listener on 127.0.0.1 (default: a free port)', numberParser({ integer: true, min: 0, max: 65535 }))
    .option('--scope <scope>', "scope to ask for (default: the one the server's metadata names)")
    .option('--timeout <ms>', `how long to wait for the browser, in milliseconds (default ${DEFAULT_LOGIN_TIMEOUT_MS})`, numberParser({ integer: true, above: 0, unit: 'milliseconds' }))
    .option('--json', 'print the progress as JSON lines (events listening, authorize, authorized, connected)');
  cmd.addHelpText(
    'after',
    `
It prints the authorization URL to open in a browser and waits for the redirect to come back to 127.0.0.1. The
login (client registration and tokens) is kept in $MCPRL_CONFIG_DIR, $XDG_CONFIG_HOME/mcprl or ~/.config/mcprl,
under oauth/, readable by you alone. Later commands refresh the tokens when they expire or the server answers 401
(once, then the request is repeated once); the refresh is made under <login file>.lock, so that several mcprl
processes holding the login spend its refresh token once (a process waits up to ${LOGIN_LOCK.waitMs / 1000} s for the holder). \`mcprl logout
<url>\` revokes the tokens at the authorization server (RFC 7009) and removes the login.

Example:
  mcprl login https://mcp.example.com/mcp && mcprl inspect https://mcp.example.com/mcp`,
  );
  cmd.action(async (url: string, opts: LoginCliOptions) => {
    const emit = (e: LoginCliEvent) => process.stdout.write(`${opts.json ? JSON.stringify(e) : render(e)}\n`);
    try {
      await login(url, { redirectPort: opts.redirectPort, scope: opts.scope, timeoutMs: opts.timeout, onEvent: emit });
      // The proof that the login works: a connection made the way every command makes it.
      const session = await connect({ kind: 'http', url });
      try {
        emit({ event: 'connected', name: session.server.name, version: session.server.version });
      } finally {
        await session.close();
      }
    } catch (err) {
      fail('login', err);
    }
  });
  return cmd;
}
