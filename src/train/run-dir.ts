/**
 * The run directory `runs/<name>/` and its crash-safe bookkeeping.
 *
 *   config.json                   the run's configuration (no secrets)
 *   scenarios/{train,val,test}.jsonl  the scenarios it trains on, validates on, and only reports (test)
 *   trajectories/step-NNNN.jsonl  every training rollout of step N (scored, with advantages)
 *   trajectories/val-NNNN.jsonl   the validation rollouts of step N (step 0: the untrained model)
 *   trajectories/test-NNNN.jsonl  the test rollouts of step N (step 0, the best step and the last step)
 *   checkpoints/step-NNNN/        PEFT adapter + optimiser state after step N (the latest and the best are kept)
 *   model.json, train-results.jsonl  the library's records of the policy (the run folder is its model folder)
 *   metrics.jsonl                 one line per step
 *   state.json                    the commit point: the last complete step, the best step, patience
 *   adapter/                      the best adapter, exported at the end (PEFT)
 *   report.html                   the run report
 *
 *   lock                          the process training the run (src/util/dir-lock.ts)
 *
 * A step is complete once state.json names it; everything else of that step was written (atomically) before.
 * Resuming reads state.json and ignores anything newer, so `kill -9` at any moment loses at most the step that
 * was in flight.
 */
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { removeStrayTemps, writeJsonAtomic, writeJsonlAtomic } from '../util/atomic.js';
import { DirLock, liveLockOwner, type LockOwner } from '../util/dir-lock.js';
import { McprlError } from '../util/errors.js';
import { CurriculumStateSchema } from './curriculum.js';

export const RunStateSchema = z.object({
  /** Last complete step (0: only the untrained model was evaluated). */
  step: z.number().int().nonnegative(),
  /** Step of the best validation success so far (0: the untrained model, i.e. no adapter). */
  bestStep: z.number().int().nonnegative(),
  bestValSuccess: z.number(),
  /** Evaluations since validation success last improved. */
  evalsWithoutImprovement: z.number().int().nonnegative(),
  /** The pass-rate curriculum's records (src/train/curriculum.ts), when the run uses it. */
  curriculum: CurriculumStateSchema.optional(),
  /** Set when the run ended: why. */
  stopped: z.enum(['max_steps', 'patience', 'no_signal']).optional(),
});
export type RunState = z.infer<typeof RunStateSchema>;

const pad = (n: number) => String(n).padStart(4, '0');

export class RunDir {
  constructor(readonly dir: string) {}

  get name(): string {
    return this.dir.split('/').filter(Boolean).pop()!;
  }
  path(...parts: string[]): string {
    return join(this.dir, ...parts);
  }
  checkpoint(step: number): string {
    return this.path('checkpoints', `step-${pad(step)}`);
  }
  trajectories(step: number): string {
    return this.path('trajectories', `step-${pad(step)}.jsonl`);
  }
  valTrajectories(step: number): string {
    return this.path('trajectories', `val-${pad(step)}.jsonl`);
  }
  testTrajectories(step: number): string {
    return this.path('trajectories', `test-${pad(step)}.jsonl`);
  }

  exists(): boolean {
    return existsSync(this.path('config.json'));
  }

  /**
   * Makes this process the run's only writer: creates the folder if needed, takes its lock (McprlError DIR_LOCKED when
   * another process trains the run), then removes temporaries that kills left behind, which are nobody's now.
   */
  async lock(): Promise<DirLock> {
    await mkdir(this.dir, { recursive: true });
    const lock = DirLock.acquire(this.dir, 'mcprl train process');
    await removeStrayTemps(this.dir);
    return lock;
  }

  /** The live process training the run (null when none). */
  trainer(): LockOwner | null {
    return liveLockOwner(this.dir);
  }

  async readState(): Promise<RunState | null> {
    const file = this.path('state.json');
    if (!existsSync(file)) return null;
    const parsed = RunStateSchema.safeParse(await readJson(file, 'the commit point of the run'));
    if (!parsed.success) throw new McprlError('RUN_DIR', `${file}: ${parsed.error.issues[0].path.join('.')}: ${parsed.error.issues[0].message}`);
    return parsed.data;
  }

  async readConfig<T>(): Promise<T> {
    return (await readJson(this.path('config.json'), "the run's configuration")) as T;
  }

  /** The metrics of complete steps (lines beyond `upTo` belong to a step that never completed). */
  async readMetrics(upTo = Infinity): Promise<Record<string, unknown>[]> {
    return this.readRows('metrics.jsonl', "a line of the run's metrics", upTo);
  }

  async writeMetrics(rows: Record<string, unknown>[]): Promise<void> {
    await writeJsonlAtomic(this.path('metrics.jsonl'), rows);
  }

  /** The rows of a JSON Lines file of the folder whose `step` is at most `upTo` (none when the file is missing). */
  async readRows(name: string, what: string, upTo = Infinity): Promise<Record<string, unknown>[]> {
    const file = this.path(name);
    if (!existsSync(file)) return [];
    return (await readFile(file, 'utf8'))
      .split('\n')
      .map((l, i) => [l, i + 1] as const)
      .filter(([l]) => l.trim() !== '')
      .map(([l, line]) => parseJson(l, `${file}:${line}`, what) as Record<string, unknown>)
      .filter((m) => (m.step as number) <= upTo);
  }

  async commit(state: RunState): Promise<void> {
    await writeJsonAtomic(this.path('state.json'), state);
  }

  /** Deletes checkpoints other than the ones to keep (the latest and the best), and leftovers of crashed writes. */
  async pruneCheckpoints(keep: number[]): Promise<void> {
    const dir = this.path('checkpoints');
    if (!existsSync(dir)) return;
    const names = new Set(keep.map((s) => `step-${pad(s)}`));
    for (const entry of await readdir(dir)) {
      if (!names.has(entry)) await rm(join(dir, entry), { recursive: true, force: true });
    }
  }
}

/**
 * JSON from a run's file, or a RUN_DIR error naming the file. Every write is atomic, so a file that does not parse
 * was changed by something else (an editor, a disk error): it is reported, never guessed around.
 */
function parseJson(text: string, where: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new McprlError('RUN_DIR', `${where} (${what}) is not valid JSON: ${(e as Error).message}; restore it, or start a new run`, { cause: e });
  }
}

async function readJson(file: string, what: string): Promise<unknown> {
  return parseJson(await readFile(file, 'utf8'), file, what);
}
