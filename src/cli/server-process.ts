/**
 * What the commands that run a server (`mcprl serve`, `mcprl backend`, `mcprl mcp --http`) share: the guard's
 * options, a clean stop on SIGINT/SIGTERM, and a failure to start told on one line with its code.
 */
import type { Command } from 'commander';

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

/** The options of the local servers' guard (src/util/http-guard.ts), worded once for every command. */
export function addGuardOptions(cmd: Command, when = ''): Command {
  return cmd
    .option('--allowed-host <name>', `${when}extra host name the Host header may carry (repeatable; loopback names and the bound host always may)`, collect)
    .option('--allowed-origin <origin>', `${when}a browser origin (scheme://host:port) allowed besides the server itself (repeatable)`, collect);
}

/**
 * On SIGINT or SIGTERM — or, for a process started with an IPC channel, when its parent goes away — runs
 * `close`, then exits 0 (a parent that crashes leaves no server behind).
 */
export function closeOnSignal(close: () => Promise<void>): void {
  let closing = false;
  const shutdown = () => {
    if (closing) return;
    closing = true;
    void close().then(() => process.exit(0));
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
  if (process.connected) process.once('disconnect', shutdown);
}

/** Writes `mcprl COMMAND: CODE: message` on one line of stderr and sets exit code 1. */
export function reportFailure(command: string, err: unknown): void {
  const code = (err as { code?: unknown }).code;
  const kind = typeof code === 'string' ? `${code}: ` : '';
  const msg = err instanceof Error ? err.message : String(err);
  process.stderr.write(`mcprl ${command}: ${kind}${msg.replace(/\s+/g, ' ').trim()}\n`);
  process.exitCode = 1;
}
