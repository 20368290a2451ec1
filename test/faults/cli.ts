/**
 * The real `mcprl` command line as a child process, for the fault tests: its exit code and what it printed.
 * The timeout is a safety net for a hung child (the machine is loaded), never what a test waits on.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { loadScenarioSet, writeScenarioSet } from '../../src/scenarios/scenario.js';
import { REPO_ROOT } from '../helpers/servers.js';

export const ENTRY = path.join(REPO_ROOT, 'src', 'cli', 'entry.ts');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function mcprl(args: string[], o: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', ENTRY, ...args], { cwd: REPO_ROOT, timeout: o.timeoutMs ?? 280_000, env: o.env ?? process.env },
      (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }));
  });
}

const KILL_AT = path.join(REPO_ROOT, 'test', 'faults', 'kill-at.ts');

/**
 * `mcprl ARGS…` with kill-at.ts preloaded, to signal itself at `at` (see kill-at.ts) with `signal` (default SIGKILL);
 * resolves with the signal that ended it, or its exit code when it exited (having handled the signal).
 */
export function mcprlKilledAt(args: string[], at: string, signal = 'SIGKILL'): Promise<{ signal: string | null; code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', '--import', KILL_AT, ENTRY, ...args], { cwd: REPO_ROOT, timeout: 280_000, env: { ...process.env, MCPRL_KILL_AT: at, MCPRL_KILL_SIGNAL: signal } },
      (err, _stdout, stderr) => resolve({ signal: err?.signal ?? null, code: err ? (typeof err.code === 'number' ? err.code : null) : 0, stderr }));
  });
}

/** Files a write cut short would leave under `dir`: temporaries and swapped-out folders (src/util/atomic.ts). */
export async function leftovers(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) if (/^\..+\.(tmp|old)$/.test(e.name)) out.push(path.join(e.parentPath, e.name));
  return out;
}

/**
 * Training scenarios of the bundled set on which the bundled tiny model's attempts most often score differently
 * (measured with 8 attempts each at temperature 1, 3 turns of 48 tokens), so a small
 * test run has groups with signal and trains. Most of the set gives the untrained model no signal at all (it
 * mostly answers at once), which is what RL has to overcome but not what a test of the machinery wants. A
 * rebuilt model may need a new list: the tests that need a trained step assert that one trained.
 */
export const BOOKSHOP_SIGNAL_IDS = ['schema-df3ad396', 'schema-9cd69dab', 'schema-b52d6a51', 'schema-2021ff7e', 'schema-9bc31822', 'schema-95acbef0', 'schema-28990cc5', 'schema-866cf4d4'];

/** The bundled set's training scenarios, those of BOOKSHOP_SIGNAL_IDS first (in that order), then the rest. */
export async function bookshopTrainSignalFirst() {
  const all = await loadScenarioSet(path.join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'));
  const rank = (id: string) => (BOOKSHOP_SIGNAL_IDS.includes(id) ? BOOKSHOP_SIGNAL_IDS.indexOf(id) : BOOKSHOP_SIGNAL_IDS.length);
  return { ...all, train: [...all.train].sort((a, b) => rank(a.id) - rank(b.id)) };
}

/** A scenario set folder `dir` of the bundled bookshop set's first `train` training (signal first) and `val` validation scenarios. */
export async function bookshopScenarios(dir: string, train: number, val: number): Promise<string> {
  const all = await bookshopTrainSignalFirst();
  await writeScenarioSet(dir, all.train.slice(0, train), all.val.slice(0, val));
  return dir;
}

/** sha256 over a file or a folder: every relative path and its bytes, sorted, so an added, moved or changed file shows. */
export function sha256Of(p: string): string {
  const h = createHash('sha256');
  let entries: string[];
  try {
    entries = readdirSync(p, { recursive: true, encoding: 'utf8' }).sort();
  } catch {
    return h.update(readFileSync(p)).digest('hex');
  }
  for (const rel of entries) {
    h.update(`${rel}\0`);
    try {
      h.update(readFileSync(path.join(p, rel)));
    } catch {
      h.update('<dir>');
    }
  }
  return h.digest('hex');
}
