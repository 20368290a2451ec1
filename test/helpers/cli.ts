/**
 * The CLI as a user runs it: `mcprl …` as a child process from the entry point, with the URL a server prints
 * once it listens, and its exit.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { join } from 'node:path';
import { REPO_ROOT } from './servers.js';

const ENTRY = join(REPO_ROOT, 'src', 'cli', 'entry.ts');

/** Starts `mcprl ARGS…`, in this process's environment or in `env`. */
export function runCli(args: string[], env?: NodeJS.ProcessEnv): ChildProcessWithoutNullStreams {
  return spawn(process.execPath, ['--import', 'tsx', ENTRY, ...args], { stdio: 'pipe', env: env ?? process.env });
}

/** Resolves with the URL the server prints once it listens; rejects if it exits first. */
export function listeningUrl(child: ChildProcessWithoutNullStreams): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (code) => reject(new Error(`${child.spawnargs.slice(3, 4).join(' ')} exited with ${code}: ${err}`)));
  });
}

/** Resolves when the process exits, with its code and everything it wrote to stderr. */
export function exited(child: ChildProcessWithoutNullStreams): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stderr }));
  });
}
