/**
 * Training runs started by the MCP server, in the background.
 *
 * A run is a worker process (train-worker.ts) that calls runTrainJob — what `mcprl train` calls — with the job this
 * server wrote to `<run>/job-config.json`. It runs in its own process group so that a slow step never blocks the
 * server, the server can end with the run still going, and stop_training can end the run together with the MCP
 * servers it spawned. Everything a client may ask about a run is read back from the run directory, never from
 * this process's memory, so a second client — or a restarted server — sees the same thing:
 *
 *   <run>/job-config.json  the job: its TrainConfig, where its scenarios come from, the safety policy (no secrets)
 *   <run>/job.json         { pid, started_at, target, model, ended_at?, exit_code?, signal?, stop_requested? }
 *   <run>/progress.jsonl   the run's progress events (phase, step, done/total; a failure's reason)
 *   <run>/train.log        the worker's stdout and stderr, for people (nothing here reads it)
 *
 * The target goes to the worker on its standard input as an `mcpServers` config, so header values and
 * environment values never appear on a command line, in a run file or in the log.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { mkdir, readdir, readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { describeTarget, type SafetyPolicy, type Target } from '../mcp/index.js';
import type { TrainConfig } from '../train/config.js';
import { TrainJobSchema, type TrainJob } from '../mcp-rl/job.js';
import { readLatestProgress } from '../train/progress-log.js';
import { RunDir, type RunState } from '../train/run-dir.js';
import { writeRunReport } from '../train/write-report.js';
import { writeJsonAtomic } from '../util/atomic.js';
import { ownerAlive, processStart } from '../util/dir-lock.js';
import { ProgressPhaseSchema, type ProgressEvent } from '../util/progress.js';
import { Workspace } from './workspace.js';
import { McprlError } from '../util/errors.js';

export const JobRecordSchema = z.object({
  pid: z.number().int(),
  /** The worker's process start time (see src/util/dir-lock.ts), so that a reused pid is not taken for it. */
  start: z.string().nullable().optional(),
  started_at: z.string(),
  /** A description of the target (command or URL): never header or environment values. */
  target: z.string(),
  model: z.string(),
  ended_at: z.string().optional(),
  exit_code: z.number().int().nullable().optional(),
  signal: z.string().nullable().optional(),
  stop_requested: z.boolean().optional(),
});
export type JobRecord = z.infer<typeof JobRecordSchema>;

export type RunStatusKind = 'starting' | 'running' | 'finished' | 'stopped' | 'failed' | 'incomplete';
/** What a run is doing: its newest progress event's phase while it runs, done once it has ended. */
export const RunPhaseSchema = ProgressPhaseSchema.exclude(['failed']);
export type RunPhase = z.infer<typeof RunPhaseSchema>;

export interface RunStatus {
  run: string;
  status: RunStatusKind;
  phase: RunPhase;
  /** Last complete step (null before step 0, the untrained model's validation, is done). */
  step: number | null;
  max_steps: number | null;
  best_step: number | null;
  best_val_success: number | null;
  val_success_before: number | null;
  stopped_reason: string | null;
  /** The newest metrics.jsonl line of a complete step. */
  latest_metrics: Record<string, unknown> | null;
  /** Within the step in flight, from the newest progress event: e.g. "gather 4/8 (step 2)". */
  activity: string | null;
  /** The newest progress event while the run runs: the phase, the step in flight, and done of total units. */
  progress: { phase: string; step: number; done: number; total: number } | null;
  adapter: string | null;
  report: string | null;
  error: string | null;
  started_at: string | null;
  ended_at: string | null;
}

/** The variable that carries the judge's key (if one was granted) into the training worker: never another. */
export const JUDGE_KEY_ENV = 'MCPRL_JUDGE_API_KEY';

/** How to run the training worker (train-worker.ts): compiled next to this file, or from source under tsx. */
export function workerCommand(): { command: string; args: string[] } {
  const here = fileURLToPath(import.meta.url);
  const fromSource = here.endsWith('.ts');
  const entry = path.join(path.dirname(here), fromSource ? 'train-worker.ts' : 'train-worker.js');
  // tsx is resolved to an absolute URL so the worker finds it whatever its working directory is.
  return { command: process.execPath, args: fromSource ? ['--import', import.meta.resolve('tsx'), entry] : [entry] };
}

/** The target as an `mcpServers` config with one server named "target" (what the worker reads on stdin). */
function targetConfig(t: Target): string {
  const entry =
    t.kind === 'stdio'
      ? { command: t.command, args: t.args, ...(t.env ? { env: t.env } : {}), ...(t.cwd ? { cwd: t.cwd } : {}) }
      : { url: t.url, ...(t.headers ? { headers: t.headers } : {}) };
  return JSON.stringify({ mcpServers: { target: entry } });
}

/** Where each phase of a step lies within the step, as [start, end) shares of it (for progress notifications). */
const PHASE_SHARE: Partial<Record<RunPhase, [number, number]>> = {
  gather: [0, 0.5],
  score: [0.5, 0.6],
  train: [0.6, 0.7],
  checkpoint: [0.7, 0.7],
  validate: [0.7, 0.95],
  test: [0.95, 1],
};

/**
 * A number that grows as the run advances (completed steps plus the share of the step in flight); progress
 * notifications report it against max_steps.
 */
export function progressValue(s: RunStatus): number {
  const base = s.step ?? 0;
  if (s.status !== 'running' && s.status !== 'starting') return s.max_steps ?? base;
  const share = PHASE_SHARE[s.phase];
  const p = s.progress;
  // Only an event of the step after the last complete one is the step in flight (not a stale one).
  if (s.step === null || !share || !p || p.step !== base + 1) return s.step === null ? 0 : base;
  const fraction = p.total > 0 ? Math.min(1, p.done / p.total) : 0;
  return base + share[0] + (share[1] - share[0]) * fraction;
}

/** A failure recorded in the run's progress (null when the newest event is not one). */
function failure(event: ProgressEvent | null): string | null {
  return event?.phase === 'failed' ? (event.message ?? 'failed') : null;
}

/** The job a run's worker runs (written by start, read by the worker). */
const JOB_CONFIG = 'job-config.json';

export class TrainingJobs {
  /** Children started by this server process: their exit is known exactly (no pid guessing). */
  private readonly children = new Map<string, ChildProcess>();
  /** Serialises job.json writes per run. */
  private readonly writes = new Map<string, Promise<void>>();

  constructor(
    private readonly ws: Workspace,
    private readonly safety: SafetyPolicy,
  ) {}

  private run(name: string): RunDir {
    return new RunDir(this.ws.runDir(name));
  }

  async readJob(name: string): Promise<JobRecord | null> {
    const file = this.run(name).path('job.json');
    if (!existsSync(file)) return null;
    const parsed = JobRecordSchema.safeParse(JSON.parse(await readFile(file, 'utf8')));
    return parsed.success ? parsed.data : null;
  }

  private updateJob(name: string, patch: Partial<JobRecord>): Promise<void> {
    const prev = this.writes.get(name) ?? Promise.resolve();
    const next = prev.then(async () => {
      const job = await this.readJob(name);
      if (job) await writeJsonAtomic(this.run(name).path('job.json'), { ...job, ...patch });
    });
    this.writes.set(name, next.catch(() => undefined));
    return next;
  }

  /**
   * True while the run's training process is alive (started by an mcprl server, or by `mcprl train` directly):
   * a child of this server is known exactly; any other holds the run's lock (src/util/dir-lock.ts), or — in the
   * moment between its start and taking the lock — is the live worker process its job.json names.
   */
  isAlive(name: string, job: JobRecord | null): boolean {
    const child = this.children.get(name);
    if (child) return child.exitCode === null && child.signalCode === null;
    if (this.run(name).trainer() !== null) return true;
    return job !== null && job.ended_at === undefined && job.start !== undefined && ownerAlive({ pid: job.pid, start: job.start, host: hostname(), since: job.started_at });
  }

  /** Names of the runs in the workspace (folders holding config.json or job.json), sorted. */
  async listRuns(): Promise<string[]> {
    const names: string[] = [];
    for (const e of await readdir(this.ws.root, { withFileTypes: true })) {
      if (!e.isDirectory()) continue;
      try {
        Workspace.checkRunName(e.name);
      } catch {
        continue;
      }
      const dir = path.join(this.ws.root, e.name);
      if (existsSync(path.join(dir, 'config.json')) || existsSync(path.join(dir, 'job.json'))) names.push(e.name);
    }
    return names.sort();
  }

  /**
   * Starts a training job in the background and returns once its worker has been spawned. The job runs under this
   * server's safety policy.
   */
  async start(name: string, target: Target, job: Omit<TrainJob, 'safety'>, judgeApiKey?: string): Promise<{ run: string; pid: number }> {
    const run = this.run(name);
    // Any existing folder is refused, not reused: it may be a failed run's evidence or something of the user's.
    if (existsSync(run.dir)) {
      throw new McprlError('WORKSPACE', `run ${JSON.stringify(name)} already exists in the workspace; choose another name (or watch it with training_status)`);
    }
    await mkdir(run.dir, { recursive: true });
    const safety = this.safety.settings();
    const jobFile = run.path(JOB_CONFIG);
    await writeJsonAtomic(jobFile, TrainJobSchema.parse({ ...job, safety }));
    const { command, args } = workerCommand();
    const argv = [...args, jobFile];
    const log = openSync(run.path('train.log'), 'a');
    const env = { ...process.env };
    delete env[JUDGE_KEY_ENV];
    if (judgeApiKey) env[JUDGE_KEY_ENV] = judgeApiKey;
    let child: ChildProcess;
    try {
      child = spawn(command, argv, { cwd: process.cwd(), detached: true, stdio: ['pipe', log, log], env });
    } finally {
      closeSync(log);
    }
    const pid = await new Promise<number>((resolve, reject) => {
      child.once('spawn', () => resolve(child.pid!));
      child.once('error', (err) => reject(new Error(`could not start the training worker: ${err.message}`)));
    });
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(targetConfig(target));
    this.children.set(name, child);
    const record: JobRecord = { pid, start: processStart(pid), started_at: new Date().toISOString(), target: describeTarget(target), model: this.ws.display(job.config.model) };
    await writeJsonAtomic(run.path('job.json'), record);
    child.once('exit', (code, signal) => {
      void this.updateJob(name, { ended_at: new Date().toISOString(), exit_code: code, signal }).catch(() => undefined);
    });
    // The run may outlive this server: do not keep the event loop alive for it.
    child.unref();
    return { run: name, pid };
  }

  /** The run's status, from its directory alone (plus this server's knowledge of children it started). */
  async status(name: string): Promise<RunStatus> {
    const run = this.run(name);
    const job = await this.readJob(name);
    if (!run.exists() && !job) throw new McprlError('WORKSPACE', `no run named ${JSON.stringify(name)} in the workspace`);
    const config = await this.readConfig(run);
    const state: RunState | null = await run.readState();
    const metrics = await run.readMetrics(state?.step ?? -1);
    const event = await readLatestProgress(run.dir);
    const alive = this.isAlive(name, job);
    const child = this.children.get(name);
    const exitCode = child ? child.exitCode : (job?.exit_code ?? null);
    const ended = !alive;

    let status: RunStatusKind;
    if (alive) status = state ? 'running' : 'starting';
    else if (job?.stop_requested) status = 'stopped';
    else if (job && exitCode !== null && exitCode !== 0) status = 'failed';
    else if (state?.stopped && existsSync(run.path('report.html'))) status = 'finished';
    else if (job && !state?.stopped) status = 'failed';
    else status = 'incomplete';

    // While the run runs, its newest progress event says what it is doing (a stale 'done' or 'failed' of an
    // earlier process of a resumed run reads as starting).
    let phase: RunPhase = 'done';
    let progress: RunStatus['progress'] = null;
    if (alive) {
      progress = event ? { phase: event.phase, step: event.step, done: event.done, total: event.total } : null;
      phase = state?.stopped ? 'report' : event && event.phase !== 'done' && event.phase !== 'failed' ? event.phase : 'starting';
    }

    const step0 = metrics.find((m) => m.step === 0);
    const latest = metrics.length ? metrics[metrics.length - 1] : null;
    const adapter = existsSync(run.path('adapter', 'adapter_config.json')) ? run.path('adapter') : null;
    const report = existsSync(run.path('report.html')) ? run.path('report.html') : null;
    let error: string | null = null;
    if (status === 'failed') error = failure(event) ?? `training exited ${exitCode !== null ? `with code ${exitCode}` : 'without finishing'}${job?.signal ? ` (signal ${job.signal})` : ''}`;

    return {
      run: name,
      status,
      phase,
      step: state?.step ?? null,
      max_steps: config?.maxSteps ?? null,
      best_step: state?.bestStep ?? null,
      best_val_success: state?.bestValSuccess ?? null,
      val_success_before: typeof step0?.val_success === 'number' ? step0.val_success : null,
      stopped_reason: state?.stopped ?? (status === 'stopped' ? 'stop_training' : null),
      latest_metrics: latest,
      activity: progress && progress.total > 0 ? `${progress.phase} ${progress.done}/${progress.total} (step ${progress.step})` : null,
      progress,
      adapter: adapter ? this.ws.display(adapter) : null,
      report: report ? this.ws.display(report) : null,
      error,
      started_at: job?.started_at ?? null,
      ended_at: ended ? (job?.ended_at ?? null) : null,
    };
  }

  /** The run's config.json, else (before the worker has written it) the config of its job; null when neither exists. */
  private async readConfig(run: RunDir): Promise<Pick<TrainConfig, 'maxSteps'> | null> {
    if (run.exists()) return run.readConfig<TrainConfig>();
    if (!existsSync(run.path(JOB_CONFIG))) return null;
    const parsed = TrainJobSchema.safeParse(JSON.parse(await readFile(run.path(JOB_CONFIG), 'utf8')));
    return parsed.success ? parsed.data.config : null;
  }

  /**
   * Ends a running run: SIGTERM to its process group (the trainer and the MCP servers it started), SIGKILL after
   * `graceMs`. The run directory stays resumable (`mcprl train --resume`); the report is regenerated from it.
   */
  async stop(name: string, graceMs = 5000): Promise<{ was_running: boolean; signal: 'SIGTERM' | 'SIGKILL' | null }> {
    const job = await this.readJob(name);
    if (!job && !this.run(name).exists()) throw new McprlError('WORKSPACE', `no run named ${JSON.stringify(name)} in the workspace`);
    // A run started from a command line has no job.json and is not a process group leader: only it is signalled
    // (the MCP servers it started end when their stdin closes).
    const pid = job ? job.pid : (this.run(name).trainer()?.pid ?? null);
    if (pid === null || !this.isAlive(name, job)) return { was_running: false, signal: null };
    if (job) await this.updateJob(name, { stop_requested: true });
    const kill = (sig: NodeJS.Signals) => {
      try {
        process.kill(job ? -pid : pid, sig);
      } catch {
        try {
          process.kill(pid, sig);
        } catch {
          /* already gone */
        }
      }
    };
    const gone = async (ms: number) => {
      const until = Date.now() + ms;
      while (Date.now() < until) {
        if (!this.isAlive(name, job)) return true;
        await new Promise((r) => setTimeout(r, 100));
      }
      return !this.isAlive(name, job);
    };
    kill('SIGTERM');
    let signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM';
    if (!(await gone(graceMs))) {
      signal = 'SIGKILL';
      kill('SIGKILL');
      await gone(5000);
    }
    if (job) await this.updateJob(name, { ended_at: new Date().toISOString(), signal });
    const run = this.run(name);
    if (run.exists() && (await run.readState())) await writeRunReport(run).catch(() => undefined);
    return { was_running: true, signal };
  }
}
