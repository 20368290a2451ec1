/**
 * A training job's parts besides its settings, and what it needs before it trains: the scenarios (the run's own on
 * resume, a folder, or generated) and the held-out check. runTrainJob (src/mcp-rl/train.ts) runs a job from start
 * to end, the same whoever starts it — `mcprl train`, or the worker process that start_training spawns
 * (src/mcp-server/train-worker.ts); the job's settings go from it to the loop and never through here.
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
import { connect, isolatedServerOpener, IsolationSchema, SafetyPolicy, SafetyPolicySchema, type Target } from '../mcp/index.js';
import { assertDisjoint, overlapCheckUnits, type Overlap } from '../scenarios/disjoint.js';
import { loadScenarioSet, parseScenarios, type Scenario, type ScenarioSet } from '../scenarios/scenario.js';
import type { OnProgress } from '../util/progress.js';
import { TrainConfigSchema, type TrainConfig } from '../train/config.js';
import type { ProgressLog } from '../train/progress-log.js';
import type { RunDir } from '../train/run-dir.js';
import { RolloutPoolSettingsSchema } from '../train/rollout-pool.js';

/** A job's parts besides its settings. */
export const TrainJobPartsSchema = z.object({
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
/** A job's parts, defaults filled in. */
export type TrainJobParts = z.output<typeof TrainJobPartsSchema>;

/** The job's SafetyPolicy. */
export function jobSafety(job: Pick<TrainJob, 'safety'>): SafetyPolicy {
  return new SafetyPolicy(job.safety);
}

/** Where a job runs: its run folder, its target under the job's safety policy, and whether it continues the run. */
export interface JobPlace {
  run: RunDir;
  target: Target;
  safety: SafetyPolicy;
  resume?: boolean;
}

/**
 * The job's scenarios, checked: the run's own on resume, else the folder's, else generated (seeded by `seed`), with
 * at least one train and one val scenario, held out from each other and from the warm-up of the model in `modelDir`.
 * Each step is a phase of `progress` (a set of a million lines takes seconds to read and check).
 */
export async function jobScenarios(
  place: JobPlace, job: TrainJobParts, model: { seed: number; modelDir: string }, progress: ProgressLog,
): Promise<ScenarioSet & { summary?: ScenarioSummary }> {
  const set = await scenariosFor(place, job, model.seed, (done, total) => progress.emit('read_scenarios', 0, done, total));
  if (set.train.length === 0 || set.val.length === 0) throw new McprlError('TRAIN_INVALID_CONFIG', 'training needs at least one train and one val scenario');
  await checkHeldOut(set, model.modelDir, (done, total) => progress.emit('check_scenarios', 0, done, total));
  return set;
}

async function scenariosFor(place: JobPlace, job: TrainJobParts, seed: number, onRead: OnProgress): Promise<ScenarioSet & { summary?: ScenarioSummary }> {
  const { run } = place;
  if (place.resume && existsSync(run.path('scenarios', 'train.jsonl'))) return loadScenarioSet(run.path('scenarios'), onRead);
  const source = job.scenarios;
  if (source.dir) return loadScenarioSet(source.dir, onRead);
  if (!source.offline && !source.generator) throw new McprlError('TRAIN_INVALID_CONFIG', 'the job names no scenarios: give a scenario set folder, offline generation, or a generator model');
  const connectOpts = { policy: place.safety, ...(job.connectTimeoutMs !== undefined ? { timeoutMs: job.connectTimeoutMs } : {}) };
  const session = await connect(place.target, { ...connectOpts, sandboxFrom: job.isolation.sandboxFrom, stateInMemory: job.isolation.stateInMemory });
  const isolatedServer = isolatedServerOpener(place.target, job.isolation, connectOpts);
  try {
    const g = source.generator;
    const set = await generateScenarioSet(session, {
      count: source.count, seed, offline: source.offline,
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
