/**
 * Sandboxed state for targets that keep it in files (server-memory's MEMORY_FILE_PATH, server-filesystem's root).
 * The placeholder `{sandbox}` in a stdio target's command, args, env values or cwd becomes a fresh temporary
 * directory for each session that connects (so for each rollout under --isolate), copied from `--sandbox-from DIR`
 * when given, and removed when the session closes. The user's own files are only ever read, to make the copy.
 */
import { cp, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { McprlError } from '../util/errors.js';
import type { Target } from './types.js';

export const SANDBOX_PLACEHOLDER = '{sandbox}';

/** How the runs of a command are kept apart from each other and from the user's data. */
export const IsolationSchema = z.object({
  /**
   * A fresh server process per rollout (stdio targets), each with its own `{sandbox}`; tools that write run only
   * then. Default false: the rollouts share one server (and one sandbox).
   */
  isolate: z.boolean().default(false),
  /** A folder whose contents are copied into every `{sandbox}`. Default: each sandbox starts empty. */
  sandboxFrom: z.string().optional(),
});
export type IsolationOptions = z.input<typeof IsolationSchema>;
export type Isolation = z.output<typeof IsolationSchema>;

/** Why a sandbox could not be made. */
export class SandboxError extends McprlError<'SANDBOX_FROM' | 'SANDBOX_CREATE'> {}

const has = (s: string | undefined) => s !== undefined && s.includes(SANDBOX_PLACEHOLDER);

/** True when the target names `{sandbox}` anywhere (command, args, env values, cwd). HTTP targets never do. */
export function targetUsesSandbox(target: Target): boolean {
  if (target.kind !== 'stdio') return false;
  return has(target.command) || target.args.some(has) || Object.values(target.env ?? {}).some(has) || has(target.cwd);
}

/** The target with every `{sandbox}` replaced by `dir`. */
export function sandboxTarget(target: Target, dir: string): Target {
  if (target.kind !== 'stdio') return target;
  const sub = (s: string) => s.split(SANDBOX_PLACEHOLDER).join(dir);
  const out: Target = { kind: 'stdio', command: sub(target.command), args: target.args.map(sub) };
  if (target.env) out.env = Object.fromEntries(Object.entries(target.env).map(([k, v]) => [k, sub(v)]));
  if (target.cwd !== undefined) out.cwd = sub(target.cwd);
  return out;
}

/**
 * A fresh directory for one session, holding a copy of `from` when given. The copy dereferences nothing outside
 * `from` and never writes there.
 */
export async function createSandbox(from?: string): Promise<string> {
  if (from !== undefined) {
    const s = await stat(from).catch(() => undefined);
    if (!s?.isDirectory()) throw new SandboxError('SANDBOX_FROM', `--sandbox-from ${from}: not a directory`);
  }
  let dir: string;
  try {
    dir = await mkdtemp(path.join(tmpdir(), 'mcprl-sandbox-'));
  } catch (err) {
    throw new SandboxError('SANDBOX_CREATE', `cannot create a sandbox directory in ${tmpdir()}: ${(err as Error).message}`, { cause: err });
  }
  if (from !== undefined) {
    try {
      await cp(from, dir, { recursive: true, preserveTimestamps: true });
    } catch (err) {
      await removeSandbox(dir);
      throw new SandboxError('SANDBOX_FROM', `--sandbox-from ${from}: cannot copy it into a sandbox: ${(err as Error).message}`, { cause: err });
    }
  }
  return dir;
}

/** Removes a sandbox made by createSandbox (best effort: a server may still hold a file open for a moment). */
export async function removeSandbox(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true, maxRetries: 3 }).catch(() => undefined);
}
