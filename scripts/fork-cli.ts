/**
 * A server command of the CLI (`mcprl serve`, `mcprl backend`) as a child process of a script: forked from the
 * entry point with an IPC channel, through which the server reports the URL it bound as data (never parsed from
 * its printed text). The child also stops if the script dies.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';

const ENTRY = join(resolve(import.meta.dirname, '..'), 'src', 'cli', 'entry.ts');

export interface ForkedServer {
  child: ChildProcess;
  url: string;
  /** Stops the server (SIGTERM) and resolves once it has exited. */
  stop(): Promise<void>;
}

/** Starts `mcprl ARGS…` (a command that listens) and resolves once it listens. */
export async function forkServer(args: string[]): Promise<ForkedServer> {
  const child = fork(ENTRY, args, { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  };
  try {
    const url = await new Promise<string>((done, fail) => {
      child.on('message', (m: { type?: string; url?: string }) => {
        if (m?.type === 'listening' && typeof m.url === 'string') done(m.url);
      });
      child.once('exit', (code, signal) => fail(new Error(`mcprl ${args[0]} exited (${signal ?? code}) before it listened`)));
    });
    return { child, url, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
