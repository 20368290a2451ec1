/**
 * Sandboxed state for targets that keep it in files (server-memory's MEMORY_FILE_PATH, server-filesystem's root).
 * The placeholder `{sandbox}` in a stdio target's command, args, env values or cwd becomes a fresh temporary
 * directory for each session that connects (so for each rollout under --isolate), copied from `--sandbox-from DIR`
 * when given, and removed when the session closes. The user's own files are only ever read, to make the copy.
 */
import { statSync } from 'node:fs';
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
  /**
   * A folder whose contents are copied into every `{sandbox}`; the target must name `{sandbox}` (there is nothing
   * to copy it into otherwise). Default: each sandbox starts empty.
   */
  sandboxFrom: z.string().optional(),
  /**
   * The user's word that the target keeps its state in memory only (nothing on disk, nothing remote), so that a
   * fresh server process per rollout (`isolate`) is isolation enough without a `{sandbox}`. Default false: a
   * fresh process isolates only when its state lives in a `{sandbox}`.
   */
  stateInMemory: z.boolean().default(false),
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

/**
 * Whether each rollout's state is its own: a fresh server process per rollout (`isolate`, stdio only) whose state
 * lives in a `{sandbox}`, or which the user declared keeps its state in memory only. The one rule behind every
 * write tool that runs (SafetyPolicy): a fresh process on the user's own file is not isolation.
 */
export function rolloutStateIsolated(target: Target, isolation: { isolate?: boolean; stateInMemory?: boolean }): boolean {
  return target.kind === 'stdio' && isolation.isolate === true && (targetUsesSandbox(target) || isolation.stateInMemory === true);
}

/**
 * Refuses `sandboxFrom` for a target that names no `{sandbox}`: nothing would be copied, and the server would run
 * on whatever state the target names (the user's own). `option` is how the caller spells the option.
 */
export function checkSandboxFrom(target: Target, sandboxFrom: string | undefined, option = '--sandbox-from'): void {
  if (sandboxFrom === undefined || targetUsesSandbox(target)) return;
  throw new SandboxError(
    'SANDBOX_FROM',
    `${option} ${sandboxFrom}: the target names no ${SANDBOX_PLACEHOLDER}, so there is nothing to copy it into and the server would run on ` +
      `its own state: write ${SANDBOX_PLACEHOLDER} where the server keeps its state (its command, args, env or cwd), e.g. ` +
      `MEMORY_FILE_PATH=${SANDBOX_PLACEHOLDER}/memory.json for server-memory or ${SANDBOX_PLACEHOLDER} as server-filesystem's folder`,
  );
}

/** Where a stdio target appears to keep state: an env value or an argument that is a path on disk (`folder` when it is one). */
export type StateLocation = ({ kind: 'env'; name: string } | { kind: 'arg'; index: number }) & { path: string; folder: boolean };

/**
 * The env values and arguments of a stdio target that name a path on disk: one that exists, or (env values, which
 * servers create on first write) an absolute path whose folder exists. A guess from the outside, to make a
 * refusal say exactly what to change; a target whose state is elsewhere gets the generic advice.
 */
export function stateLocations(target: Target): StateLocation[] {
  if (target.kind !== 'stdio') return [];
  const cwd = target.cwd ?? process.cwd();
  const kindOf = (v: string) => statSync(path.resolve(cwd, v), { throwIfNoEntry: false });
  const looksLikePath = (v: string) => v !== '' && !v.includes(SANDBOX_PLACEHOLDER) && !v.startsWith('-') && !/^[a-z][a-z0-9+.-]*:\/\//i.test(v);
  const out: StateLocation[] = [];
  for (const [name, v] of Object.entries(target.env ?? {})) {
    if (!looksLikePath(v)) continue;
    const s = kindOf(v);
    if (s || (path.isAbsolute(v) && kindOf(path.dirname(v))?.isDirectory())) out.push({ kind: 'env', name, path: v, folder: s?.isDirectory() ?? false });
  }
  // The interpreter's script (node's first argument that is not a flag) is code, not state.
  const script = firstScriptIndex(target.args);
  target.args.forEach((a, index) => {
    const s = looksLikePath(a) ? kindOf(a) : undefined;
    if (!s || (index === script && s.isFile() && /\.(m?[jt]s|cjs|py)$/.test(a))) return;
    out.push({ kind: 'arg', index, path: a, folder: s.isDirectory() });
  });
  return out;
}

/** The index of the first argument that is not a flag (an interpreter's script), or -1. */
function firstScriptIndex(args: string[]): number {
  for (let i = 0; i < args.length; i++) {
    if (args[i].startsWith('-')) {
      // `--import tsx`, `-r x`: the flag's value is not the script either.
      if (/^--?(import|r|require|loader)$/.test(args[i])) i++;
      continue;
    }
    return i;
  }
  return -1;
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
