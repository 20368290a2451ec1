/**
 * `mcprl train`: GRPO on a LoRA adapter until validation success stops improving. runTrainJob runs a job from start
 * to end, the same whoever starts it — `mcprl train`, or start_training's worker (src/mcp-server/train-worker.ts):
 * the scenarios (src/mcp-rl/job.ts), config.json, `train()`, the report and the best adapter.
 *
 * The policy is the library's TrainableModel on a LocalBackend kept in the run folder, so this loop is the library's
 * client as an application's would be, and the run's checkpoints are the model's. state.json, written last, is the
 * run's commit point. Rollouts run in-process or on rollout servers (src/train/rollout-pool.ts), optionally gathered
 * ahead of training (src/train/gather-ahead.ts). Test success is only reported, never used for a decision, so it
 * stays an unbiased estimate of what the selected adapter does on unseen tasks.
 */
import { performance } from 'node:perf_hooks';
import { isSuccess } from '../eval/evaluate.js';
import type { Policy } from '../agent/policy.js';
import type { McpTrajectory } from '../agent/trajectory.js';
import type { ChatEngine } from '../chat/chat-engine.js';
import { EnginePolicy } from '../agent/engine-policy.js';
import { checkTargetTools } from '../agent/rollout-groups.js';
import { LocalBackend } from '../backend/local-backend.js';
import type { TrainResult, TrainStepConfigInput, TrajectoryGroupInput } from '../backend/schemas.js';
import { TrainableModel } from '../backend/trainable-model.js';
import type { Model } from '../engine/model.js';
import { checkSandboxFrom, refusedWrites, SandboxError, type IsolationOptions, type SafetyPolicy, type Target } from '../mcp/index.js';
import { OpenAIJudge, type JudgeClient } from '../ruler/judge.js';
import type { ScenarioSummary } from '../scenarios/scenario-set.js';
import { writeScenarioSet, type Scenario } from '../scenarios/scenario.js';
import { chooseDevice, describeDevice } from '../engine/device.js';
import { writeJsonAtomic, writeJsonlAtomic } from '../util/atomic.js';
import { McprlError } from '../util/errors.js';
import { inSpan, startSpan, withinSpan, type TraceSpan } from '../util/tracing.js';
import type { TrainConfig } from '../train/config.js';
import { Curriculum } from '../train/curriculum.js';
import { ProgressLog } from '../train/progress-log.js';
import type { RunDir, RunState } from '../train/run-dir.js';
import { checkpointAdapter, RolloutPool, type RolloutPoolEvents, type RolloutPoolSettings } from '../train/rollout-pool.js';
import { GatherAhead } from '../train/gather-ahead.js';
import { writeRunReport } from '../train/write-report.js';
import { jobSafety, jobScenarios, TrainJobPartsSchema, type TrainJob } from './job.js';
import { gatherStep, heldOut, recordPolicyStep, regatherStale, scoredAlike, trainable, trainableOne, type GatheredStep } from './gather.js';
import { constrainMetrics, kvCacheMetrics, rewardStd, rolloutServerMetrics, stalenessMetrics, withAdvantages } from './step-metrics.js';

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

/** A training job from start to end: its scenarios, config.json, the run, the report and the best adapter. */
export async function runTrainJob(o: TrainJobOptions): Promise<TrainJobResult> {
  const { run, target, resume } = o;
  const config = o.job.config;
  const job = TrainJobPartsSchema.parse(o.job);
  const progress = o.progress ?? new ProgressLog(run.dir);
  const safety = jobSafety(job);
  // A sandbox source with no {sandbox} to copy it into fails the job before anything is loaded or written.
  checkSandboxFrom(target, job.isolation.sandboxFrom);
  // Where the engine runs, and why: the first progress line and config.json say so. A device that cannot run
  // fails here, before the scenarios are read (the CLI has checked it before creating the run folder).
  const deviceChoice = chooseDevice(config.device, { modelDir: config.model });
  progress.emit('starting', 0, 0, 0, describeDevice(deviceChoice));
  const { summary: scenarioSummary, ...scenarios } = await jobScenarios({ run, target, safety, resume }, job, { seed: config.seed, modelDir: config.model }, progress);
  if (!resume) {
    await writeJsonAtomic(run.path('config.json'), { ...config, deviceChoice });
    await writeScenarioSet(run.path('scenarios'), scenarios.train, scenarios.val, scenarios.test, (done, total) => progress.emit('write_scenarios', 0, done, total));
  }
  const judge = config.judge ? new OpenAIJudge({ ...config.judge, apiKey: process.env[job.judgeApiKeyEnv] }) : undefined;

  const result = await train({ run, config, target, scenarios, judge, safety, isolation: job.isolation, connectTimeoutMs: job.connectTimeoutMs, ...(job.rollout ? { rollout: job.rollout } : {}), resume, progress, log: o.log });
  progress.emit('report', result.state.step);
  const { adapter, report } = await writeRunReport(run, { exportBest: true });
  progress.emit('done', result.state.step);
  return { result, adapter, report, ...(scenarioSummary ? { scenarioSummary } : {}) };
}

export interface TrainRunOptions {
  run: RunDir;
  config: TrainConfig;
  target: Target;
  /** `test` (optional) is only reported: see the module comment. */
  scenarios: { train: Scenario[]; val: Scenario[]; test?: Scenario[] };
  judge?: JudgeClient;
  safety?: SafetyPolicy;
  /**
   * Fresh server per rollout, what each `{sandbox}` starts from, and whether the target keeps its state in memory
   * only (see src/mcp/sandbox.ts). Default: shared.
   */
  isolation?: IsolationOptions;
  /** Connect/initialize timeout for the target, in milliseconds. Default: src/mcp's. */
  connectTimeoutMs?: number;
  /** Rollout servers (OpenAI API in vLLM's dialect) to run rollouts on. Default: the in-process engine. */
  rollout?: RolloutPoolSettings;
  /** Observers of the rollout servers (answers, drops). */
  rolloutEvents?: RolloutPoolEvents;
  /** Continue from the newest complete step instead of starting fresh. */
  resume?: boolean;
  /**
   * Tests only: control points of asynchronous rollouts, so that a test decides which adapter samples what instead
   * of timing. `gatherAhead`: how many adapters a gather may run behind the one it trains (default maxStaleness;
   * more makes groups go stale, to exercise their discarding); `onGathered`: a step's groups are in (ahead or
   * not); `beforePublish`: awaited before a step's adapter is published to the servers.
   */
  asyncHooks?: { gatherAhead?: number; onGathered?: (step: number) => void; beforePublish?: (step: number) => Promise<void> };
  /** Where progress events go. Default: the run's progress.jsonl alone (no bars). */
  progress?: ProgressLog;
  log?: (line: string) => void;
}

export interface TrainRunResult {
  state: RunState;
  valBefore: number;
  valBest: number;
  bestStep: number;
  /** Test success of the untrained model, the selected checkpoint (bestStep) and the last step; null without a test set. */
  test: { before: number; best: number; last: number; lastStep: number } | null;
}

/** Trains the run until validation success stops improving or maxSteps, from its last complete step with `resume`. */
export async function train(o: TrainRunOptions): Promise<TrainRunResult> {
  const c = o.config;
  if (c.maxStaleness > 0 && !o.rollout) {
    throw new McprlError('TRAIN_INVALID_CONFIG', `maxStaleness ${c.maxStaleness} (--max-staleness) needs rollout servers (--rollout-url): in-process, the engine cannot generate while it trains`);
  }
  let state = o.resume ? await o.run.readState() : null;
  // The run's commit point is state.json: a checkpoint newer than it is of a step that never completed (and before
  // step 0 completed, none is the run's), so it goes before the library resumes the model from its newest checkpoint.
  await o.run.pruneCheckpoints(state ? [state.step, state.bestStep] : []);
  const job = openJob(o);
  try {
    const t = await setUp(job, state);
    // Step 0: the untrained model (the adapter's B is zero, so it is the base model).
    if (!state) state = await stepZero(t);
    // Each step's row counts the servers' requests of that step alone (not step 0's validation).
    t.pool?.takeStats();
    const valBefore = (t.metrics.find((m) => m.step === 0)?.val_success as number) ?? 0;
    // Steps in a row whose every rollout was lost to infrastructure failures (see maxUntrainedSteps).
    let untrained = 0;
    // Asynchronous rollouts: gathers run ahead of training, from the step after the adapter now served.
    if (c.maxStaleness > 0 && !state.stopped && state.step < c.maxSteps) {
      job.ahead = new GatherAhead((step, signal) => gatherFor(t, step, signal), { published: state.step, last: c.maxSteps, ahead: o.asyncHooks?.gatherAhead ?? c.maxStaleness });
    }

    while (!state.stopped && state.step < c.maxSteps) {
      const step = state.step + 1;
      const clock = stepClock(step);
      // gather + score (+ replace groups without signal)
      const g = await gather(t, step, clock);
      // step, in the library: advantages → sequences → optimiser steps → checkpoint → the new adapter serves
      const r = await trainStep(t, step, g, clock);
      const row = stepRow(t, step, g, r);
      // validate → select the checkpoint → stop?
      const next = await validate(t, state, step, row, clock);
      // test (the run's last step only): this step's adapter, and the checkpoint validation selected
      if (next.stopped && t.testSet.length > 0) await testLast(t, step, next.bestStep, row, clock);
      // commit: the metrics row, state.json, and only the latest and the best checkpoints kept
      await commitStep(t, next, row, clock);
      state = next;
      t.log(stepLine(t, step, g, r, row, next.bestStep, clock.wall));
      // Nothing trained because nothing could be scored: after maxUntrainedSteps such steps, stop loudly.
      untrained = r.sequences === 0 && g.lost.length === g.rollouts.length ? untrained + 1 : 0;
      if (untrained >= c.maxUntrainedSteps) {
        const why = g.lost[0]?.error ?? g.lost[0]?.unscored ?? 'no rollout';
        throw new McprlError('TRAIN_NOTHING_TRAINED', `steps ${step - untrained + 1}-${step} trained nothing: every rollout was lost to an infrastructure failure (first: ${why}); ` +
          `the run is kept at step ${step}: fix the cause, then continue it with --resume`);
      }
    }
    await job.ahead?.close();
    job.ahead = null;
    await job.pool?.close();
    job.pool = null;
    return { state, valBefore, valBest: state.bestValSuccess, bestStep: state.bestStep, test: testResult(t.metrics, state) };
  } finally {
    await job.ahead?.close().catch(() => undefined);
    await job.pool?.close().catch(() => undefined);
    await job.backend.close();
  }
}

/** What a run holds open while it trains: the library's backend and model, and the rollout servers; closed by train. */
interface Job {
  readonly o: TrainRunOptions;
  readonly c: TrainConfig;
  readonly run: RunDir;
  readonly log: (line: string) => void;
  readonly events: ProgressLog;
  readonly backend: LocalBackend;
  readonly policyModel: TrainableModel;
  pool: RolloutPool | null;
  ahead: GatherAhead<GatheredStep> | null;
}

/** A job set up to train: its engine, the policy rollouts use, the run's metrics so far, and the step's settings. */
interface Trainer extends Job {
  readonly engine: ChatEngine;
  readonly model: Model;
  /** The in-process engine's policy at the validation temperature (validation runs on it unless the servers validate). */
  readonly local: EnginePolicy;
  /** Training rollouts' policy, at the training temperature: the servers (each serving the current adapter under its own name), or the engine. */
  readonly policy: Policy;
  readonly metrics: Record<string, unknown>[];
  readonly curriculum: Curriculum | null;
  readonly stepConfig: TrainStepConfigInput;
  readonly testSet: Scenario[];
}

function openJob(o: TrainRunOptions): Job {
  const { run, config: c } = o;
  // The policy is the library's model, kept in the run's own folder: its checkpoints are the run's. The run's chat
  // template variables reach every prompt the engine renders: rollouts and tokenisation alike.
  const backend = new LocalBackend({ dir: run.dir, modelDir: () => run.dir, device: c.device, ...(c.chatTemplateKwargs ? { chatTemplateKwargs: c.chatTemplateKwargs } : {}), ...(c.weightDtype ? { weightDtype: c.weightDtype } : {}), ...(c.prefixCacheMib !== undefined ? { prefixCacheMib: c.prefixCacheMib } : {}), ...(c.kvCacheMib !== undefined ? { kvCacheMib: c.kvCacheMib } : {}) });
  const policyModel = new TrainableModel({ project: 'mcprl', name: 'policy', baseModel: c.model, lora: { rank: c.rank, alpha: c.alpha, targets: c.targets, seed: c.seed } });
  return {
    o, c, run, backend, policyModel, pool: null, ahead: null,
    log: o.log ?? ((l: string) => process.stderr.write(l + '\n')),
    events: o.progress ?? new ProgressLog(run.dir),
  };
}

/** Registers the model (resumed at the state's step), starts the rollout servers, and checks the target's tools. */
async function setUp(job: Job, state: RunState | null): Promise<Trainer> {
  const { o, c, run, log, policyModel } = job;
  await policyModel.register(job.backend);
  if (policyModel.step !== (state?.step ?? 0)) {
    throw new McprlError('RUN_DIR', `${run.path('state.json')} names step ${state?.step ?? 0}, but the newest checkpoint is ${run.checkpoint(policyModel.step)}: restore ${run.checkpoint(state?.step ?? 0)}, or start a new run`);
  }
  const engine = job.backend.chatEngine(policyModel);
  // Each policy samples as it is made to: rollouts at the training temperature, validation at its own (greedy).
  const onEngine = (temperature: number) => new EnginePolicy(engine, { model: policyModel.inferenceName, temperature, maxTokens: c.maxTokens, samplerLogprobs: c.trainAtSamplingTemperature, constrainToolCalls: c.constrainToolCalls });
  const local = onEngine(c.valTemperature);
  if (o.rollout) {
    // Training at the sampling temperature needs the sampler's own logprobs: mcprl's servers return them on
    // request (mcprl_sampler_logprobs); turns from servers that do not return them train at temperature 1
    // (the metric sampler_logprob_turns counts the turns that had them).
    const extraBody = { constrain_tool_calls: c.constrainToolCalls, ...(c.trainAtSamplingTemperature ? { mcprl_sampler_logprobs: true } : {}) };
    job.pool = new RolloutPool(o.rollout, { temperature: c.temperature, maxTokens: c.maxTokens, extraBody, log, events: o.rolloutEvents });
    await job.pool.publish(policyModel.step, checkpointAdapter(run.checkpoint(policyModel.step)));
  }
  const metrics = await run.readMetrics(state?.step ?? -1);
  const curriculum = c.curriculum === 'pass_rate' ? new Curriculum(o.scenarios.train, state?.curriculum, { power: c.curriculumPower, retireAfter: c.curriculumRetireAfter }) : null;
  const testSet = o.scenarios.test ?? [];
  // Every step is a step of the model, trained or not (alwaysStep), so the run's step numbers are the model's.
  const stepConfig: TrainStepConfigInput = {
    lr: c.lr, loss: c.loss, beta: c.beta, updates: c.updatesPerStep, lrSchedule: lrScheduleOf(c), alwaysStep: true,
    // The servers' logprobs are another engine's: weighed against the trainer's own log π (truncated IS).
    ...(job.pool ? { tisCap: c.tisCap } : {}),
  };

  // Scenarios whose checks name tools the server lacks are refused before any step (not scored as failures).
  await checkTargetTools(o.target, [...o.scenarios.train, ...o.scenarios.val, ...testSet], { policy: o.safety, timeoutMs: o.connectTimeoutMs });
  // The write tools the safety policy will refuse in every rollout, and the change that makes them run: one line.
  const refused = await refusedWrites(o.target, o.isolation ?? {}, { policy: o.safety, timeoutMs: o.connectTimeoutMs }).catch((err: unknown) => {
    if (err instanceof SandboxError) throw err;
    return undefined;
  });
  if (refused) log(refused);
  // The job itself becomes the trainer, so that what train closes is what the steps opened.
  return Object.assign(job, { engine, model: engine.model as Model, local, policy: job.pool ?? onEngine(c.temperature), metrics, curriculum, stepConfig, testSet });
}

/** Step 0: the untrained model's validation (and test) success, the baseline every later step is compared with. */
async function stepZero(t: Trainer): Promise<RunState> {
  const { c, run } = t;
  const v = await inSpan('mcprl.train.step', { 'mcprl.step': 0 }, () => validateAt(t, 0));
  // The baseline every later step is compared with: one that measured the infrastructure is no baseline.
  if (v.lost !== null) throw new McprlError('TRAIN_VALIDATION_INFRA', `validation of the untrained model (step 0): ${v.lost}; nothing was recorded`);
  const row: Record<string, unknown> = { step: 0, val_success: v.success_rate, val_mean_reward: v.mean_reward, val_tool_call_validity: v.tool_call_validity_rate, wall_s: { validate: v.duration_ms / 1000 } };
  if (t.testSet.length > 0) row.test_success = await testAt(t, 0, t.policyModel.inferenceName);
  // maxSteps 0: step 0 is the run's last, so it reports as a last step does (the selected checkpoint is step 0).
  if (c.maxSteps === 0 && t.testSet.length > 0) Object.assign(row, { test_success_best: row.test_success, best_step: 0 });
  t.metrics.push(row);
  await run.writeMetrics(t.metrics);
  const state: RunState = { step: 0, bestStep: 0, bestValSuccess: v.success_rate, evalsWithoutImprovement: 0, ...(c.maxSteps === 0 ? { stopped: 'max_steps' as const } : {}) };
  await run.commit(state);
  t.log(`step 0: validation success ${pct(v.success_rate)}` + (row.test_success !== undefined ? `, test success ${pct(row.test_success as number | null)}` : '') + ' (untrained)');
  return state;
}

/** A step's wall-clock seconds per phase, and its trace span (a no-op unless traces are on), parent of the phases'. */
interface StepClock {
  wall: Record<string, number>;
  span: TraceSpan;
  phase: <T>(name: string, f: () => Promise<T>) => Promise<T>;
}

function stepClock(step: number): StepClock {
  const wall: Record<string, number> = {};
  const span = startSpan('mcprl.train.step', { 'mcprl.step': step });
  const phase = async <T>(name: string, f: () => Promise<T>) => {
    const t0 = performance.now();
    const r = await withinSpan(span, f);
    wall[name] = (performance.now() - t0) / 1000;
    return r;
  };
  return { wall, span, phase };
}

/** A step's groups as gathered, those trained on (their trainable attempts), every rollout, and the lost ones. */
interface StepGroups {
  gathered: GatheredStep;
  groups: McpTrajectory[][];
  rollouts: McpTrajectory[];
  lost: McpTrajectory[];
  /** The in-process engine's prefix cache counters before and after the gather. */
  cache: { before: ReturnType<Model['prefixCacheStats']>; after: ReturnType<Model['prefixCacheStats']> };
}

/**
 * Gathers and scores the step's groups. Asynchronously, it takes the groups gathered ahead (wall_s.gather is then
 * the wait) and gathers again, on the adapter trained now, any group sampled more than N steps before it.
 */
async function gather(t: Trainer, step: number, clock: StepClock): Promise<StepGroups> {
  const { c, curriculum, ahead } = t;
  const before = t.model.prefixCacheStats();
  const gathered = await clock.phase('gather', async () => {
    if (!ahead) return gatherFor(t, step);
    return regatherStale(t.o, t.pool!, await ahead.take(step), step, step - 1, t.events);
  });
  const after = t.model.prefixCacheStats();
  if (curriculum) {
    for (const g of gathered.groups) if (g.length > 0) curriculum.record(g[0].scenario_id, trainable(g).length, trainable(g).filter(isSuccess).length, scoredAlike(c.loss, g));
  }
  t.pool?.ensureAlive(`step ${step}`);
  const rollouts = gathered.groups.flat();
  return { gathered, groups: gathered.groups.map(trainable), rollouts, lost: rollouts.filter((x) => !trainableOne(x)), cache: { before, after } };
}

/** A step's groups, each trajectory with the step of the adapter that sampled it (rollout servers). */
async function gatherFor(t: Trainer, step: number, signal?: AbortSignal): Promise<GatheredStep> {
  const g = await gatherStep(t.o, t.policy, t.curriculum, step, t.events, signal);
  if (t.pool) for (const x of g.groups.flat()) recordPolicyStep(x, t.pool);
  t.o.asyncHooks?.onGathered?.(step);
  return g;
}

/**
 * The library's step on the groups (advantages, sequences from the exact sampled token ids, minibatches, optimiser
 * steps, the checkpoint), the step's rollouts written with their advantages, and the new adapter published.
 */
async function trainStep(t: Trainer, step: number, g: StepGroups, clock: StepClock): Promise<TrainResult> {
  const { run, events, pool } = t;
  const trainGroups = g.groups.filter((x) => x.length > 0);
  const r = await clock.phase('train', () => t.policyModel.train(trainGroups.map(libraryGroup), t.stepConfig, {
    onProgress: (e) => {
      if (e.phase === 'train') events.emit('train', step, e.done, e.total);
      if (e.phase === 'checkpoint' && e.done === 0) events.emit('checkpoint', step);
    },
  }));
  // checkpoint: the step's rollouts, with their advantages
  await clock.phase('checkpoint', () => writeJsonlAtomic(run.trajectories(step), withAdvantages(g.rollouts, trainGroups, r.advantages)));
  // publish: the servers load this step's adapter and later rollouts use it
  if (pool) {
    await t.o.asyncHooks?.beforePublish?.(step);
    await clock.phase('publish', () => pool.publish(step, checkpointAdapter(run.checkpoint(step))));
    t.ahead?.published(step);
  }
  return r;
}

/**
 * Validates when due, and decides the step's state: the selected checkpoint (the best validation success; on a tie
 * between trained steps the later one, since validation cannot tell them apart and it trained on more, while a
 * trained step must beat the untrained model) and whether to stop (patience counts validations without a strict
 * improvement, or maxSteps).
 */
async function validate(t: Trainer, state: RunState, step: number, row: Record<string, unknown>, clock: StepClock): Promise<RunState> {
  const c = t.c;
  const next: RunState = { ...state, step, ...(t.curriculum ? { curriculum: t.curriculum.state() } : {}) };
  if (step % c.evalEvery === 0 || step === c.maxSteps) {
    const v = await clock.phase('validate', () => validateAt(t, step));
    if (v.lost !== null) {
      // Not a model result: recorded as missing, and neither a best step nor a step without improvement.
      Object.assign(row, { val_success: null, val_rollout_errors: v.rollout_errors });
      t.log(`step ${step}: validation not counted: ${v.lost}`);
    } else {
      Object.assign(row, { val_success: v.success_rate, val_mean_reward: v.mean_reward, val_tool_call_validity: v.tool_call_validity_rate });
      const improved = v.success_rate > state.bestValSuccess;
      if (improved || (v.success_rate === state.bestValSuccess && state.bestStep > 0)) Object.assign(next, { bestStep: step, bestValSuccess: v.success_rate });
      next.evalsWithoutImprovement = improved ? 0 : next.evalsWithoutImprovement + 1;
      if (next.evalsWithoutImprovement >= c.patience) next.stopped = 'patience';
    }
  }
  if (step >= c.maxSteps && !next.stopped) next.stopped = 'max_steps';
  return next;
}

/** Validation of the adapter now served; on the servers, it names the adapter it started on, whatever later gathers switch to. */
function validateAt(t: Trainer, step: number) {
  return heldOut(t.o, t.pool?.validates ? t.pool.at(t.pool.name, t.c.valTemperature) : t.local, 'val', step, t.events);
}

/** Test success of an adapter the in-process engine serves, or null when the rollouts measured the infrastructure. */
async function testAt(t: Trainer, step: number, adapter: string): Promise<number | null> {
  const r = await heldOut(t.o, new EnginePolicy(t.engine, { model: adapter, temperature: t.c.valTemperature, maxTokens: t.c.maxTokens, constrainToolCalls: t.c.constrainToolCalls }), 'test', step, t.events);
  if (r.lost !== null) t.log(`step ${step}: test not counted: ${r.lost}`);
  return r.lost === null ? r.success_rate : null;
}

/** The run's last step on the test set: its own adapter, and the checkpoint validation selected. */
async function testLast(t: Trainer, step: number, bestStep: number, row: Record<string, unknown>, clock: StepClock): Promise<void> {
  await clock.phase('test', async () => {
    row.test_success = await testAt(t, step, t.policyModel.inferenceName);
    // The selected checkpoint is this step's own adapter when the last step is the best: measured once.
    row.test_success_best = bestStep === step ? row.test_success : await selectedOnTest(t, bestStep);
  });
  row.best_step = bestStep;
}

/** Test success of the best step's checkpoint: measured at step 0 for the untrained model, else loaded and run. */
async function selectedOnTest(t: Trainer, bestStep: number): Promise<number | null> {
  const known = t.metrics.find((m) => m.step === bestStep)?.test_success;
  if (typeof known === 'number') return known;
  if (bestStep === 0) return testAt(t, 0, t.engine.modelName);
  await t.model.loadAdapter('selected', t.run.checkpoint(bestStep));
  try {
    return await testAt(t, bestStep, 'selected');
  } finally {
    t.model.unloadAdapter('selected');
  }
}

/** Ends the step: its row in metrics.jsonl, state.json (the commit point), and the checkpoints past the latest and the best deleted. */
async function commitStep(t: Trainer, next: RunState, row: Record<string, unknown>, clock: StepClock): Promise<void> {
  row.wall_s = clock.wall;
  clock.span.set(Object.fromEntries(Object.entries(row).filter(([, v]) => typeof v === 'number').map(([k, v]) => [`mcprl.${k}`, v as number])));
  clock.span.end();
  t.metrics.push(row);
  await t.run.writeMetrics(t.metrics);
  await t.run.commit(next);
  await t.policyModel.deleteCheckpoints({ best: next.bestStep });
}

/** The step's line in the log. */
function stepLine(t: Trainer, step: number, g: StepGroups, r: TrainResult, row: Record<string, unknown>, bestStep: number, wall: Record<string, number>): string {
  return `step ${step}: reward ${fmt(row.train_reward)} ± ${fmt(row.reward_std)}, loss ${fmt(row.loss)}, kl ${fmt(row.kl)}, dropped ${r.droppedGroups}/${g.groups.length} groups` +
    (t.c.resampleRounds > 0 ? ` (${g.gathered.replaced} gathered to replace them)` : '') +
    (row.val_success !== undefined ? `, validation success ${pct(row.val_success as number)}` : '') +
    (row.test_success !== undefined ? `, test success ${pct(row.test_success as number | null)} (step ${step}), ${pct(row.test_success_best as number | null)} (best step ${bestStep})` : '') +
    ` (${Object.entries(wall).map(([k, s]) => `${k} ${s.toFixed(1)}s`).join(', ')})`;
}

/** A group of the step as the library takes it: each attempt's conversation, its tools and its reward. */
function libraryGroup(g: McpTrajectory[]): TrajectoryGroupInput {
  return { trajectories: g.map((t) => ({ messages: t.messages, tools: t.tools, reward: t.reward })), metadata: { scenario_id: g[0].scenario_id } };
}

/** The learning-rate schedule of a run over all its optimiser steps (maxSteps × updatesPerStep). */
export function lrScheduleOf(c: TrainConfig): NonNullable<TrainStepConfigInput['lrSchedule']> {
  if (c.lrSchedule === 'constant' && c.warmupSteps === 0) return { kind: 'constant', warmupSteps: 0 };
  return { kind: c.lrSchedule === 'cosine' ? 'cosine' : 'warmup', warmupSteps: c.warmupSteps, totalSteps: c.maxSteps * c.updatesPerStep };
}

/** The test figures of a finished run, from its metrics (null when it has no test set or has not finished). */
export function testResult(metrics: Record<string, unknown>[], state: RunState): TrainRunResult['test'] {
  const before = metrics.find((m) => m.step === 0)?.test_success;
  const last = metrics.find((m) => m.step === state.step);
  if (typeof before !== 'number' || typeof last?.test_success !== 'number' || typeof last.test_success_best !== 'number') return null;
  return { before, best: last.test_success_best, last: last.test_success, lastStep: state.step };
}

/** The step's row of metrics.jsonl before validation: its rewards, the library step's figures, and where rollouts ran. */
function stepRow(t: Trainer, step: number, g: StepGroups, r: TrainResult): Record<string, unknown> {
  const { c, pool } = t;
  const { gathered, groups, rollouts, lost, cache } = g;
  return {
    step, train_reward: gathered.summary.mean_reward, reward_std: rewardStd(groups), train_success: gathered.summary.success_rate,
    tool_call_validity: gathered.summary.tool_call_validity_rate, groups: groups.length, groups_dropped_zero_variance: r.droppedGroups,
    unscored: gathered.summary.unscored_trajectories, judge_failures: gathered.summary.judge_failures, sequences: r.sequences,
    // Infrastructure failures (unscored or errored rollouts) apart from task failures (scored, not a success).
    infra_failures: lost.length, rollout_errors: rollouts.filter((x) => x.error !== undefined).length,
    // Calls whose outcome is unknown (connection lost mid-call): failures for the checks, counted apart.
    unknown_outcomes: rollouts.reduce((n, x) => n + (x.metrics.unknown_outcomes ?? 0), 0),
    task_failures: rollouts.filter((x) => trainableOne(x) && !isSuccess(x)).length,
    ...(c.resampleRounds > 0 ? { groups_replaced: gathered.replaced, resample_rounds: gathered.rounds, groups_trained: r.advantages.filter((a) => a !== null).length } : {}),
    ...(c.constrainToolCalls ? constrainMetrics(t.engine, gathered.groups, step === 1 ? t.log : null) : {}),
    ...(pool ? rolloutServerMetrics(pool, rollouts, r.tokenIdsDiffer, r.offPolicy) : {}),
    // The in-process engine's prefill during the gather: prompt tokens whose KV came from the prefix cache, and
    // prompt tokens computed (the servers' own are on their /metrics).
    ...(pool ? {} : { prefix_cache_hit_tokens: cache.after.hitTokens - cache.before.hitTokens, prefilled_tokens: cache.after.prefilledTokens - cache.before.prefilledTokens }),
    // Its KV cache (src/engine/kv-cache.ts): the budget, and the most its sequences and prefix blocks held at once
    // since it loaded.
    ...(pool ? {} : kvCacheMetrics(t.model.kvCacheStats())),
    ...(t.ahead ? stalenessMetrics(rollouts, step - 1, gathered.tooStale) : {}),
    ...(r.trained ? { loss: r.loss, policy_loss: r.policyLoss, kl: r.kl, clip_fraction: r.clipFraction, mean_ratio: r.meanRatio, entropy: r.entropy, grad_norm: r.gradNorm, trained_tokens: r.trainedTokens, tokens_per_s: r.tokensPerSecond, lr: r.lr } : {}),
  };
}

const pct = (x: number | null) => (x === null ? 'not counted' : `${(x * 100).toFixed(1)}%`);
const fmt = (x: unknown) => (typeof x === 'number' ? x.toFixed(3) : '–');
