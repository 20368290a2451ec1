/**
 * The real `mcprl` command line as a child process, for the fault tests: its exit code and what it printed.
 * The timeout is a safety net for a hung child (the machine is loaded), never what a test waits on.
 */
import { execFile } from 'node:child_process';
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

/** A scenario set folder `dir` of the bundled bookshop set's first `train` training and `val` validation scenarios. */
export async function bookshopScenarios(dir: string, train: number, val: number): Promise<string> {
  const all = await loadScenarioSet(path.join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'));
  await writeScenarioSet(dir, all.train.slice(0, train), all.val.slice(0, val));
  return dir;
}
