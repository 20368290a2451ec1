/**
 * A training job from start to end, the same whoever starts it — `mcprl train`, or the worker process that
 * start_training spawns (src/mcp-server/train-worker.ts): the scenarios (the run's own on resume, a folder, or
 * generated), the held-out check, config.json, `train()`, the report and the best adapter.
 *
 * A job is data (TrainJobSchema): start_training writes it to `<run>/job-config.json` for its worker. It holds no
 * secret: API keys stay in environment variables named here, and the target (whose headers and environment may
 * hold secrets) is passed beside the job, never in it.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { generateScenarioSet, type ScenarioSummary } from '../scenarios/scenario-set.js';
import { McprlError } from '../util/errors.js';
import { checkSandboxFrom, connect, isolatedServerOpener, IsolationSchema, SafetyPolicy, SafetyPolicySchema, type Target } from '../mcp/index.js';
import { OpenAIJudge } from '../ruler/judge.js';
import { assertDisjoint, overlapCheckUnits, type Overlap } from '../scenarios/disjoint.js';
import { loadScenarioSet, parseScenarios, writeScenarioSet, type Scenario, type ScenarioSet } from '../scenarios/scenario.js';
import { writeJsonAtomic } from '../util/atomic.js';
import type { OnProgress } from '../util/progress.js';
import { chooseDevice, describeDevice } from '../engine/device.js';
import { TrainConfigSchema, type TrainConfig } from '../train/config.js';
import { ProgressLog } from '../train/progress-log.js';
import type { RunDir } from '../train/run-dir.js';
import { train, type TrainRunResult } from './train.js';
import { RolloutPoolSettingsSchema } from '../train/rollout-pool.js';
import { writeRunReport } from '../train/write-report.js';

/** A job's parts besides its settings. */
const TrainJobPartsSchema = z.object({
  /** Where the scenarios come from when the run has none yet: a folder, else generated (offline or by an LLM). */
  scenarios: z.object({
    /** A scenario set folder (train.jsonl + val.jsonl). */
    dir: z.string().optional(),
    /** Generate verifiable scenarios from the tool schemas (no LLM). */
    offline: z.boolean().optional(),
    /** Scenarios to generate, train and val together. Default 24. */
    count: z.number().int().positive().default(24),
    /** An OpenAI-compatible LLM that writes the scenarios; its API key is read from the variable apiKeyEnv. */
    generator: z.object({ model: z.string(), baseURL: z.string().optional(), apiKeyEnv: z.string(), timeoutMs: z.number().int().positive().optional() }).optional(),
  }),
  /** Environment variable holding the judge's API key. Default OPENAI_API_KEY. */
  judgeApiKeyEnv: z.string().default('OPENAI_API_KEY'),
  /** The operator's safety policy for the target's tools (see SafetyPolicy). */
  safety: SafetyPolicySchema,
  /**
   * Whether rollouts get a fresh server each, what their `{sandbox}` starts from, and whether the target was declared
   * in-memory. Default: shared, empty, not in-memory.
   */
  isolation: IsolationSchema.default({ isolate: false, stateInMemory: false }),
  /** Connect/initialize timeout for the target, in milliseconds. Default 30000. */
  connectTimeoutMs: z.number().int().positive().optional(),
  /** Rollout servers (`--rollout-url`; src/train/rollout-pool.ts). Default: rollouts on the in-process engine. */
  rollout: RolloutPoolSettingsSchema.optional(),
});

/** A job as written to job-config.json: its settings (a run's TrainConfig) and its other parts. */
export const TrainJobSchema = TrainJobPartsSchema.extend({ config: TrainConfigSchema });

/**
 * A job as runTrainJob takes it: its config already parsed — by trainConfigFrom, parseTrainConfig or TrainJobSchema,
 * whichever made it — and so not parsed again; the other parts as written, defaults filled in by runTrainJob.
 */
export type TrainJob = z.input<typeof TrainJobPartsSchema> & { config: TrainConfig };
type ParsedTrainJob = z.output<typeof TrainJobPartsSchema> & { config: TrainConfig };

export interface TrainJobOptions {
  run: RunDir;
  job: TrainJob;
  target: Target;
  /** Continue the run from its newest complete step (its config and scenarios are the run's own). */
  resume?: boolean;
  /** Where progress goes. Default: the run's progress.jsonl alone. */
  progress?: ProgressLog;
  log?: (line: string) => void;
}

export interface TrainJobResult {
  result: TrainRunResult;
  /** The exported best adapter (null when no step beat the untrained model). */
  adapter: string | null;
  report: string;
  /** What generation made, per tool (only when this job generated its scenarios). */
  scenarioSummary?: ScenarioSummary;
}

/** The job's SafetyPolicy. */
export function jobSafety(job: Pick<TrainJob, 'safety'>): SafetyPolicy {
  return new SafetyPolicy(job.safety);
}

export async function runTrainJob(o: TrainJobOptions): Promise<TrainJobResult> {
  const { run, target } = o;
  const job: ParsedTrainJob = { ...TrainJobPartsSchema.parse(o.job), config: o.job.config };
  const config = job.config;
  const progress = o.progress ?? new ProgressLog(run.dir);
  const safety = jobSafety(job);
  // A sandbox source with no {sandbox} to copy it into fails the job before anything is loaded or written.
  checkSandboxFrom(target, job.isolation.sandboxFrom);
  // Where the engine runs, and why: the first progress line and config.json say so. A device that cannot run
  // fails here, before the scenarios are read (the CLI has checked it before creating the run folder).
  const deviceChoice = chooseDevice(config.device, { modelDir: config.model });
  progress.emit('starting', 0, 0, 0, describeDevice(deviceChoice));

  // A set of a million lines takes seconds to read, check and write: each is a phase with progress.
  const { summary: scenarioSummary, ...scenarios } = await scenariosFor(o, job, safety, (done, total) => progress.emit('read_scenarios', 0, done, total));
  if (scenarios.train.length === 0 || scenarios.val.length === 0) throw new McprlError('TRAIN_INVALID_CONFIG', 'training needs at least one train and one val scenario');
  await checkHeldOut(scenarios, config.model, (done, total) => progress.emit('check_scenarios', 0, done, total));
  if (!o.resume) {
    await writeJsonAtomic(run.path('config.json'), { ...config, deviceChoice });
    await writeScenarioSet(run.path('scenarios'), scenarios.train, scenarios.val, scenarios.test, (done, total) => progress.emit('write_scenarios', 0, done, total));
  }
  const judge = config.judge ? new OpenAIJudge({ ...config.judge, apiKey: process.env[job.judgeApiKeyEnv] }) : undefined;

  const result = await train({ run, config, target, scenarios, judge, safety, isolation: job.isolation, connectTimeoutMs: job.connectTimeoutMs, ...(job.rollout ? { rollout: job.rollout } : {}), resume: o.resume, progress, log: o.log });
  progress.emit('report', result.state.step);
  const { adapter, report } = await writeRunReport(run, { exportBest: true });
  progress.emit('done', result.state.step);
  return { result, adapter, report, ...(scenarioSummary ? { scenarioSummary } : {}) };
}

async function scenariosFor(o: TrainJobOptions, job: ParsedTrainJob, safety: SafetyPolicy, onRead: OnProgress): Promise<ScenarioSet & { summary?: ScenarioSummary }> {
  const { run } = o;
  if (o.resume && existsSync(run.path('scenarios', 'train.jsonl'))) return loadScenarioSet(run.path('scenarios'), onRead);
  const source = job.scenarios;
  if (source.dir) return loadScenarioSet(source.dir, onRead);
  if (!source.offline && !source.generator) throw new McprlError('TRAIN_INVALID_CONFIG', 'the job names no scenarios: give a scenario set folder, offline generation, or a generator model');
  const connectOpts = { policy: safety, ...(job.connectTimeoutMs !== undefined ? { timeoutMs: job.connectTimeoutMs } : {}) };
  const session = await connect(o.target, { ...connectOpts, sandboxFrom: job.isolation.sandboxFrom, stateInMemory: job.isolation.stateInMemory });
  const isolatedServer = isolatedServerOpener(o.target, job.isolation, connectOpts);
  try {
    const g = source.generator;
    const set = await generateScenarioSet(session, {
      count: source.count, seed: job.config.seed, offline: source.offline,
      // Write tasks only where each replay's state is its own (a {sandbox}, or a target declared in-memory).
      ...(isolatedServer ? { isolatedServer } : {}),
      ...(g ? { generator: { model: g.model, baseURL: g.baseURL, apiKey: process.env[g.apiKeyEnv], timeoutMs: g.timeoutMs } } : {}),
    });
    return { train: set.train, val: set.val, test: [], summary: set.summary };
  } finally {
    await session.close();
  }
}

/**
 * Held-out means held out (src/scenarios/disjoint.ts): refuses validation scenarios that overlap the training or
 * the model's warm-up scenarios, and test scenarios that overlap any of those, saying what to use instead.
 * `onProgress` counts scenarios indexed and checked over both checks (a million-line set takes seconds).
 */
export async function checkHeldOut(scenarios: Pick<ScenarioSet, 'train' | 'val'> & { test?: Scenario[] }, modelDir: string, onProgress?: OnProgress): Promise<void> {
  const warmup = await warmupScenarios(modelDir);
  const warmupFile = path.join(path.basename(modelDir), WARMUP_FILE);
  const advice = (file: string) => (overlaps: Overlap[]): string => {
    const ids = [...new Set(overlaps.map((o) => o.heldOut.id))];
    const list = `${ids.slice(0, 8).join(', ')}${ids.length > 8 ? `, … (${ids.length} in all)` : ''}`;
    const fromWarmup = overlaps.some((o) => o.otherSet === 'warm-up');
    return (
      `Instead: ${fromWarmup ? `this model was warmed up on the tasks in ${warmupFile}, so a scenario set generated from the same server repeats them; use a set drawn apart from its warm-up (an mcprl-built model comes with one: for the bundled tiny model, fixtures/scenarios/bookshop), or ` : ''}` +
      `remove ${list} from ${file}${fromWarmup ? '' : ', or generate the set again (mcprl scenarios keeps train and val apart)'}`
    );
  };
  const checks: { name: string; heldOut: Scenario[]; others: Record<string, Scenario[]>; file: string }[] = [
    { name: 'validation', heldOut: scenarios.val, others: { train: scenarios.train, 'warm-up': warmup }, file: 'val.jsonl' },
    { name: 'test', heldOut: scenarios.test ?? [], others: { train: scenarios.train, validation: scenarios.val, 'warm-up': warmup }, file: 'test.jsonl' },
  ];
  const total = checks.reduce((n, c) => n + overlapCheckUnits(c.heldOut, c.others), 0);
  onProgress?.(0, total);
  let before = 0;
  for (const c of checks) {
    assertDisjoint(c.name, c.heldOut, c.others, advice(c.file), onProgress && ((done) => onProgress(before + done, total)));
    before += overlapCheckUnits(c.heldOut, c.others);
  }
}

const WARMUP_FILE = 'mcprl_warmup.jsonl';

/** The warm-up tasks recorded with a bundled model (mcprl_warmup.jsonl), if any: validation must avoid them too. */
async function warmupScenarios(modelDir: string): Promise<Scenario[]> {
  const file = path.join(modelDir, WARMUP_FILE);
  return existsSync(file) ? parseScenarios(await readFile(file, 'utf8'), file) : [];
}
