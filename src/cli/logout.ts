/**
 * `mcprl logout <url>` / `mcprl logout --all`: revokes the tokens `mcprl login` stored at the authorization server
 * (RFC 7009) and removes the login, even where the revocation fails.
 */
import type { Command } from 'commander';
import { McpConnectError } from '../mcp/errors.js';
import { logout, logoutAll, type LogoutResult } from '../mcp/oauth-logout.js';
import { fail } from './login.js';

/** The lines of one logout: what was removed on stdout, a revocation that did not happen on stderr. */
function report(r: LogoutResult): void {
  if (!r.file) {
    process.stdout.write(`no login stored for ${r.server}\n`);
    return;
  }
  const revoked = r.revoked.length === 2 ? 'revoked its tokens, ' : '';
  process.stdout.write(`logged out of ${r.server} (${revoked}removed ${r.file})\n`);
  if (r.notRevoked) {
    process.stderr.write(`mcprl logout: the tokens of ${r.server} were not revoked, only deleted here (${r.notRevoked}); they stay valid at the authorization server until they expire\n`);
  }
}

export function registerLogout(program: Command): Command {
  const cmd = program
    .command('logout')
    .description('revoke and remove the OAuth login `mcprl login` stored for a server')
    .argument('[url]', "the MCP server's http(s) URL")
    .option('--all', 'log out of every stored login');
  cmd.addHelpText(
    'after',
    `
The refresh token and then the access token are revoked at the authorization server's revocation endpoint
(RFC 7009, from its metadata), and the login file is deleted. Where the authorization server offers no revocation,
or it fails, the file is deleted all the same and one line on stderr says the tokens stay valid until they expire.

Example:
  mcprl logout https://mcp.example.com/mcp`,
  );
  cmd.action(async (url: string | undefined, opts: { all?: boolean }) => {
    try {
      if (opts.all) {
        if (url !== undefined) throw new McpConnectError('CONFIG', 'give either a URL or --all, not both');
        const { results, removed } = await logoutAll();
        for (const r of results) report(r);
        const n = results.filter((r) => r.file).length + removed.length;
        process.stdout.write(`removed ${n} stored login${n === 1 ? '' : 's'}\n`);
        return;
      }
      if (url === undefined) throw new McpConnectError('CONFIG', 'name the server to log out of (its URL), or pass --all');
      report(await logout(url));
    } catch (err) {
      fail('logout', err);
    }
  });
  return cmd;
}
