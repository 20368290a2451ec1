/**
 * `mcprl logout <url>` / `mcprl logout --all`: removes what `mcprl login` stored.
 */
import type { Command } from 'commander';
import { McpConnectError } from '../mcp/errors.js';
import { removeAllLogins, removeLogin, serverKey } from '../mcp/oauth-store.js';
import { fail } from './login.js';

export function registerLogout(program: Command): Command {
  return program
    .command('logout')
    .description('remove the OAuth login `mcprl login` stored for a server')
    .argument('[url]', "the MCP server's http(s) URL")
    .option('--all', 'remove every stored login')
    .action((url: string | undefined, opts: { all?: boolean }) => {
      try {
        if (opts.all) {
          if (url !== undefined) throw new McpConnectError('CONFIG', 'give either a URL or --all, not both');
          const files = removeAllLogins();
          process.stdout.write(`removed ${files.length} stored login${files.length === 1 ? '' : 's'}\n`);
          return;
        }
        if (url === undefined) throw new McpConnectError('CONFIG', 'name the server to log out of (its URL), or pass --all');
        const file = removeLogin(url);
        process.stdout.write(file ? `logged out of ${serverKey(url)} (removed ${file})\n` : `no login stored for ${serverKey(url)}\n`);
      } catch (err) {
        fail('logout', err);
      }
    });
}
