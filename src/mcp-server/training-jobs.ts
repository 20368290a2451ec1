/**
 * Training runs started by the MCP server, in the background.
 *
 * A run is an ordinary `mcprl train` child process (the same code path as the command line), started in its own
 * process group so that a slow step never blocks the server, the server can end with the run still going, and
 * stop_training can end the run together with the MCP servers it spawned. Everything a client may ask about a run
 * is read back from the run directory, never from this process's memory, so a second client — or a restarted
 * server — sees the same thing:
 *
 *   <run>/job.json   { pid, started_at, target, model, ended_at?, exit_code?, signal?, stop_requested? }
 *   <run>/train.log  the child's stdout and stderr (progress lines, `step N: …` lines, the final error)
 *
 * The target goes to the child on its standard input as an `mcpServers` config (see train-child.ts), so header
 * values and environment values never appear on a command line, in job.json or in the log.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { mkdir, readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import type { SafetyPolicy, Target } from '../mcp/index.js';
import { RunDir, type RunState } from '../train/run-dir.js';
import { writeRunReport } from '../train/write-report.js';
import { writeJsonAtomic } from '../util/atomic.js';
import { Workspace, WorkspaceError } from './workspace.js';

export const JobRecordSchema = z.object({
  pid: z.number().int(),
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

/** The `mcprl train` options start_training passes on (camelCase as in TrainConfig; see `mcprl train --help`). */
export interface TrainJobOptions {
  scenarios?: string;
  offline?: boolean;
  count?: number;
  maxSteps?: number;
  evalEvery?: number;
  patience?: number;
  groupsPerStep?: number;
  updatesPerStep?: number;
  rolloutsPerGroup?: number;
  lr?: number;
  rank?: number;
  alpha?: number;
  loss?: string;
  beta?: number;
  seed?: number;
  temperature?: number;
  maxTurns?: number;
  maxTokens?: number;
  concurrency?: number;
  reward?: 'ruler' | 'checks' | 'blend';
  /** A RULER judge; its API key stays in the environment variable named here (default OPENAI_API_KEY). */
  judge?: { baseUrl: string; model: string; apiKeyEnv?: string };
}

export type RunStatusKind = 'starting' | 'running' | 'finished' | 'stopped' | 'failed' | 'incomplete';
export type RunPhase = 'starting' | 'gather' | 'train' | 'validate' | 'report' | 'done';

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
  /** Within the step in flight: what the log says (e.g. "gather 4/8 (50%) 12.1s"). */
  activity: string | null;
  adapter: string | null;
  report: string | null;
  error: string | null;
  started_at: string | null;
  ended_at: string | null;
}

const LOG_TAIL_BYTES = 16 * 1024;

/** How to run the training child (train-child.ts): compiled next to this file, or from source under tsx. */
export function trainCommand(): { command: string; args: string[] } {
  const here = fileURLToPath(import.meta.url);
  const fromSource = here.endsWith('.ts');
  const entry = path.join(path.dirname(here), fromSource ? 'train-child.ts' : 'train-child.js');
  // tsx is resolved to an absolute URL so the child finds it whatever its working directory is.
  return { command: process.execPath, args: fromSource ? ['--import', import.meta.resolve('tsx'), entry] : [entry] };
}

/** The target as an `mcpServers` config with one server named "target" (what train-child reads on stdin). */
function targetConfig(t: Target): string {
  const entry =
    t.kind === 'stdio'
      ? { command: t.command, args: t.args, ...(t.env ? { env: t.env } : {}), ...(t.cwd ? { cwd: t.cwd } : {}) }
      : { url: t.url, ...(t.headers ? { headers: t.headers } : {}) };
  return JSON.stringify({ mcpServers: { target: entry } });
}

export function describeTarget(t: Target): string {
  return t.kind === 'stdio' ? [t.command, ...t.args].join(' ') : t.url;
}

function policyArgs(p: SafetyPolicy): string[] {
  return [
    ...(p.allowDestructive ? ['--allow-destructive'] : []),
    ...p.allowPatterns.flatMap((a) => ['--allow', a]),
    ...p.denyPatterns.flatMap((d) => ['--deny', d]),
  ];
}

function optionArgs(o: TrainJobOptions): string[] {
  const out: string[] = [];
  const flag = (name: string, v: number | string | undefined) => {
    if (v !== undefined) out.push(`--${name}`, String(v));
  };
  if (o.scenarios) out.push('--scenarios', o.scenarios);
  if (o.offline) out.push('--offline');
  flag('count', o.count);
  flag('max-steps', o.maxSteps);
  flag('eval-every', o.evalEvery);
  flag('patience', o.patience);
  flag('groups-per-step', o.groupsPerStep);
  flag('updates-per-step', o.updatesPerStep);
  flag('rollouts-per-group', o.rolloutsPerGroup);
  flag('lr', o.lr);
  flag('rank', o.rank);
  flag('alpha', o.alpha);
  flag('loss', o.loss);
  flag('beta', o.beta);
  flag('seed', o.seed);
  flag('temperature', o.temperature);
  flag('max-turns', o.maxTurns);
  flag('max-tokens', o.maxTokens);
  flag('concurrency', o.concurrency);
  flag('reward', o.reward);
  if (o.judge) {
    out.push('--judge-base-url', o.judge.baseUrl, '--judge-model', o.judge.model);
    flag('judge-api-key-env', o.judge.apiKeyEnv);
  }
  return out;
}

/** True while `pid` is a live training process of run `runName` in `root` (a reused pid or a zombie does not count). */
export function isTrainProcess(pid: number, runName: string, root: string): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const proc = `/proc/${pid}/cmdline`;
  if (!existsSync('/proc/self/cmdline')) return true; // no procfs (macOS): the signal check is all there is
  try {
    const argv = readFileSync(proc, 'utf8').split('\0');
    const i = argv.indexOf('--run');
    const j = argv.indexOf('--runs-dir');
    return i >= 0 && argv[i + 1] === runName && j >= 0 && argv[j + 1] === root;
  } catch {
    return false;
  }
}

/**
 * A `mcprl train --run NAME` process started from a command line (not by this server) whose runs folder is `root`:
 * found through /proc (Linux), so that such a run shows as running and can be stopped too. Null when none.
 */
export function findCliTrainProcess(runName: string, root: string): number | null {
  if (!existsSync('/proc/self/cmdline')) return null;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (!argv.includes('train')) continue;
      const value = (flag: string) => {
        const i = argv.indexOf(flag);
        if (i >= 0) return argv[i + 1];
        return argv.find((a) => a.startsWith(`${flag}=`))?.slice(flag.length + 1);
      };
      if (value('--run') !== runName) continue;
      const runsDir = path.resolve(readlinkSync(`/proc/${entry}/cwd`), value('--runs-dir') ?? 'runs');
      if (realpathSync(runsDir) === root) return Number(entry);
    } catch {
      // The process ended while we looked, or it is not ours to inspect.
    }
  }
  return null;
}

/** Reads the log's last lines (the file can grow large; only its tail matters). */
async function logTail(file: string): Promise<string[]> {
  if (!existsSync(file)) return [];
  const buf = await readFile(file);
  return buf.subarray(Math.max(0, buf.length - LOG_TAIL_BYTES)).toString('utf8').split('\n').map((l) => l.trim()).filter(Boolean);
}

/** What the log says the step in flight is doing: the newest progress line after the newest `step N:` line. */
function activityFromLog(lines: string[]): { phase: RunPhase; activity: string | null; fraction: number } {
  for (let i = lines.length - 1; i >= 0; i--) {
    const l = lines[i];
    if (/^step \d+:/.test(l)) return { phase: 'gather', activity: null, fraction: 0 };
    const m = /^(gather|validate) (\d+)\/(\d+) /.exec(l);
    if (m) {
      const frac = Number(m[3]) > 0 ? Number(m[2]) / Number(m[3]) : 0;
      // Once every rollout is gathered, the step trains and checkpoints until the next progress line.
      if (m[1] === 'gather') return frac >= 1 ? { phase: 'train', activity: l, fraction: 1 } : { phase: 'gather', activity: l, fraction: frac };
      return { phase: 'validate', activity: l, fraction: frac };
    }
  }
  return { phase: 'starting', activity: null, fraction: 0 };
}

/** The last line of the log that explains a failure (the CLI prints `mcprl train: …` and exits 1). */
function errorFromLog(lines: string[]): string | null {
  for (let i = lines.length - 1; i >= 0; i--) if (lines[i].startsWith('mcprl train:')) return lines[i];
  return null;
}

/**
 * A number that grows as the run advances (completed steps plus the share of the step in flight); progress
 * notifications report it against max_steps.
 */
export function progressValue(s: RunStatus, fraction: number): number {
  const base = s.step ?? 0;
  if (s.status !== 'running' && s.status !== 'starting') return s.max_steps ?? base;
  const within = s.phase === 'gather' ? 0.6 * fraction : s.phase === 'train' ? 0.65 : s.phase === 'validate' ? 0.7 + 0.25 * fraction : 0;
  return s.step === null ? 0 : base + within;
}

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

  /** True while the run's training process is alive (started by an mcprl server, or by `mcprl train` directly). */
  isAlive(name: string, job: JobRecord | null): boolean {
    const child = this.children.get(name);
    if (child) return child.exitCode === null && child.signalCode === null;
    if (job === null) return findCliTrainProcess(name, this.ws.root) !== null;
    return job.ended_at === undefined && isTrainProcess(job.pid, name, this.ws.root);
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

  /** Starts `mcprl train` in the background and returns once the child has been spawned. */
  async start(name: string, target: Target, modelDir: string, opts: TrainJobOptions): Promise<{ run: string; pid: number }> {
    const run = this.run(name);
    // Any existing folder is refused, not reused: it may be a failed run's evidence or something of the user's.
    if (existsSync(run.dir)) {
      throw new WorkspaceError(`run ${JSON.stringify(name)} already exists in the workspace; choose another name (or watch it with training_status)`);
    }
    await mkdir(run.dir, { recursive: true });
    const { command, args } = trainCommand();
    const argv = [
      ...args,
      '--model', modelDir,
      '--run', name,
      '--runs-dir', this.ws.root,
      ...optionArgs(opts),
      ...policyArgs(this.safety),
    ];
    const log = openSync(run.path('train.log'), 'a');
    let child: ChildProcess;
    try {
      child = spawn(command, argv, { cwd: process.cwd(), detached: true, stdio: ['pipe', log, log], env: process.env });
    } finally {
      closeSync(log);
    }
    const pid = await new Promise<number>((resolve, reject) => {
      child.once('spawn', () => resolve(child.pid!));
      child.once('error', (err) => reject(new Error(`could not start mcprl train: ${err.message}`)));
    });
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(targetConfig(target));
    this.children.set(name, child);
    const job: JobRecord = { pid, started_at: new Date().toISOString(), target: describeTarget(target), model: this.ws.display(modelDir) };
    await writeJsonAtomic(run.path('job.json'), job);
    child.once('exit', (code, signal) => {
      void this.updateJob(name, { ended_at: new Date().toISOString(), exit_code: code, signal }).catch(() => undefined);
    });
    // The run may outlive this server: do not keep the event loop alive for it.
    child.unref();
    return { run: name, pid };
  }

  /** The run's status, from its directory alone (plus this server's knowledge of children it started). */
  async status(name: string): Promise<{ status: RunStatus; fraction: number }> {
    const run = this.run(name);
    const job = await this.readJob(name);
    if (!run.exists() && !job) throw new WorkspaceError(`no run named ${JSON.stringify(name)} in the workspace`);
    const config = run.exists() ? await run.readConfig<{ maxSteps?: number }>() : null;
    const state: RunState | null = await run.readState();
    const metrics = await run.readMetrics(state?.step ?? -1);
    const lines = await logTail(run.path('train.log'));
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

    let phase: RunPhase;
    let activity: string | null = null;
    let fraction = 0;
    if (alive) {
      if (state?.stopped) phase = 'report';
      else ({ phase, activity, fraction } = activityFromLog(lines));
      if (!state && phase === 'starting' && activity === null) phase = 'starting';
    } else phase = 'done';

    const step0 = metrics.find((m) => m.step === 0);
    const latest = metrics.length ? metrics[metrics.length - 1] : null;
    const adapter = existsSync(run.path('adapter', 'adapter_config.json')) ? run.path('adapter') : null;
    const report = existsSync(run.path('report.html')) ? run.path('report.html') : null;
    let error: string | null = null;
    if (status === 'failed') error = errorFromLog(lines) ?? `mcprl train exited ${exitCode !== null ? `with code ${exitCode}` : 'without finishing'}${job?.signal ? ` (signal ${job.signal})` : ''}`;

    return {
      fraction,
      status: {
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
        activity,
        adapter: adapter ? this.ws.display(adapter) : null,
        report: report ? this.ws.display(report) : null,
        error,
        started_at: job?.started_at ?? null,
        ended_at: ended ? (job?.ended_at ?? null) : null,
      },
    };
  }

  /**
   * Ends a running run: SIGTERM to its process group (the trainer and the MCP servers it started), SIGKILL after
   * `graceMs`. The run directory stays resumable (`mcprl train --resume`); the report is regenerated from it.
   */
  async stop(name: string, graceMs = 5000): Promise<{ was_running: boolean; signal: 'SIGTERM' | 'SIGKILL' | null }> {
    const job = await this.readJob(name);
    if (!job && !this.run(name).exists()) throw new WorkspaceError(`no run named ${JSON.stringify(name)} in the workspace`);
    // A run started from a command line has no job.json and is not a process group leader: only it is signalled
    // (the MCP servers it started end when their stdin closes).
    const pid = job ? job.pid : findCliTrainProcess(name, this.ws.root);
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
