/**
 * Another mcprl process holding the same stored login, for the login-lock race of test/mcp-oauth.test.ts. Run as
 * `node --import tsx test/helpers/oauth-refresher.ts URL` with MCPRL_CONFIG_DIR set: it loads the stored login,
 * says `ready`, waits for a line on stdin (the test's barrier, which releases several such processes together),
 * refreshes the access token it loaded (as a 401 or an expiry would make it), and connects to show that it ends
 * authorized. It reports JSON lines on stdout: ready, waiting (it found the login's lock held: once), refreshed,
 * connected (with the access token it ended with). A failure is one line on stderr and exit code 1.
 */
import { connect } from '../../src/mcp/session.js';
import { StoredLoginProvider } from '../../src/mcp/oauth-provider.js';
import { readLogin } from '../../src/mcp/oauth-store.js';

const url = process.argv[2];
const emit = (e: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(e)}\n`);

try {
  const login = readLogin(url);
  if (!login) throw new Error(`no login stored for ${url}`);
  let waited = false;
  const provider = new StoredLoginProvider(url, login, {
    // A short poll: the test releases the holder only once this process has said it waits.
    lock: {
      pollMs: 5,
      onWait: (busy) => {
        if (!waited) emit({ event: 'waiting', holder: busy.holder.pid });
        waited = true;
      },
    },
  });
  emit({ event: 'ready' });
  await new Promise((resolve) => process.stdin.once('data', resolve));
  process.stdin.destroy();
  await provider.refresh(login.tokens.access_token);
  emit({ event: 'refreshed' });
  const session = await connect({ kind: 'http', url });
  try {
    emit({ event: 'connected', name: session.server.name, accessToken: readLogin(url)?.tokens.access_token });
  } finally {
    await session.close();
  }
} catch (err) {
  process.stderr.write(`${err instanceof Error ? `${(err as { code?: string }).code ?? err.name}: ${err.message}` : String(err)}\n`);
  process.exitCode = 1;
}
