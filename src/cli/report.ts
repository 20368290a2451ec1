/**
 * `mcprl report <run>`: regenerates runs/<name>/report.html from the run directory.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { RunDir } from '../train/run-dir.js';
import { writeRunReport } from '../train/write-report.js';

/** A run given by folder path, or by name under `runsDir`. */
export function resolveRun(nameOrDir: string, runsDir = 'runs'): RunDir {
  const dir = existsSync(path.join(nameOrDir, 'config.json')) ? nameOrDir : path.join(runsDir, nameOrDir);
  const run = new RunDir(dir);
  if (!run.exists()) throw new Error(`no run at ${nameOrDir} (nor ${path.join(runsDir, nameOrDir)}): expected a folder with config.json`);
  return run;
}

export function registerReport(program: Command): Command {
  return program
    .command('report')
    .description("regenerate a run's self-contained report.html")
    .argument('<run>', 'run folder, or run name under --runs-dir')
    .option('--runs-dir <dir>', 'where runs live', 'runs')
    .action(async (name: string, o: { runsDir: string }) => {
      try {
        const { report } = await writeRunReport(resolveRun(name, o.runsDir));
        process.stdout.write(`${report}\n`);
      } catch (err) {
        process.stderr.write(`mcprl report: ${(err as Error).message}\n`);
        process.exitCode = 1;
      }
    });
}
