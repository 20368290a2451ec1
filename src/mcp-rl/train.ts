/**
 * `mcprl train`: GRPO on a LoRA adapter until validation success stops improving.
 *
 * The policy is the library's TrainableModel on a LocalBackend whose model folder is the run folder
 * (src/backend/local-backend.ts): the same code that trains, checkpoints and serves an application's model does so
 * here, and this loop is its client, as an application's would be.
 *
 * Every step: gather K rollouts of G training scenarios on the model's engine, in-process (drawn in a seeded
 * shuffle, or by their recent pass rate with `curriculum: 'pass_rate'`) → score them (checks, RULER or both) → with
 * `resampleRounds`, replace groups whose rewards are all alike by groups of other scenarios (DAPO's dynamic
 * sampling) → `model.train(groups)`: group-relative advantages (groups with one reward value carry no signal and
 * are dropped), training sequences with assistant masks from the exact sampled token ids, `updatesPerStep`
 * optimiser steps, an atomic checkpoint, the new adapter served → the step's trajectories → every `evalEvery`
 * steps, validation → stop when validation success has not improved for `patience` evaluations, or at `maxSteps`.
 * Step 0 evaluates the untrained model. The run's commit point is state.json, written last.
 *
 * With rollout servers (`rollout`, `mcprl train --rollout-url`), rollouts (and validation) run there instead
 * (src/train/rollout-pool.ts): each step's adapter is published to them after the checkpoint, training uses the
 * token ids and logprobs they returned, and their logprobs are corrected towards the trainer's by truncated
 * importance sampling (the step's `tisCap`, src/train/off-policy.ts). With `trainAtSamplingTemperature` the servers
 * are asked for their sampler's logprobs (mcprl's extension), so a split run trains on the same distribution as an
 * in-process one.
 *
 * With `maxStaleness` N ≥ 1 (rollout servers only) the loop is asynchronous: the next steps' groups are gathered
 * while this one trains (src/train/gather-ahead.ts), on whatever adapter the servers serve at the time, at most N
 * steps older than the one trained; each trajectory records the step of the oldest adapter that sampled it
 * (`policy_step`, from the adapter names the servers answered with), a group past N is discarded and gathered again
 * on the current adapter, and truncated importance sampling weighs the stale logprobs towards the trained policy.
 * Validation runs on the step's own adapter. A kill loses the groups gathered ahead (a resumed run regathers them).
 *
 * With a test set, the untrained model (step 0), the last step and the selected checkpoint (the best step by
 * validation) are also measured on it. Test success is only reported, never used for a decision, so unlike
 * the best validation success it is an unbiased estimate of what the selected adapter does on unseen tasks.
 */
import { performance } from 'node:perf_hooks';
import { isSuccess, runEval, summarizeEval, type EvalSummary } from '../eval/evaluate.js';
import type { Policy } from '../agent/policy.js';
import type { Trajectory } from '../agent/trajectory.js';
import type { ChatEngine } from '../chat/chat-engine.js';
import { EnginePolicy } from '../agent/engine-policy.js';
import { checkTargetTools } from '../agent/rollout-groups.js';
import { LocalBackend } from '../backend/local-backend.js';
import type { TrainResult, TrainStepConfigInput, TrajectoryGroupInput } from '../backend/schemas.js';
import { TrainableModel } from '../backend/trainable-model.js';
import type { KvCacheStats, Model } from '../engine/model.js';
import { refusedWrites, SandboxError, type IsolationOptions, type SafetyPolicy, type Target } from '../mcp/index.js';
import type { JudgeClient } from '../ruler/judge.js';
import { createRng } from '../util/rng.js';
import type { Scenario } from '../scenarios/scenario.js';
import { writeJsonlAtomic } from '../util/atomic.js';
import { McprlError } from '../util/errors.js';
import { inSpan, startSpan, withinSpan } from '../util/tracing.js';
import { advantagesFor } from '../train/advantages.js';
import type { PolicyLoss, TrainConfig } from '../train/config.js';
import { Curriculum } from '../train/curriculum.js';
import { ProgressLog, type PhaseProgress } from '../train/progress-log.js';
import type { RunDir, RunState } from '../train/run-dir.js';
import { checkpointAdapter, RolloutPool, type RolloutPoolEvents, type RolloutPoolSettings } from '../train/rollout-pool.js';
import { hasSampledIds } from '../train/tokenize.js';
import { GatherAhead, staleOf } from '../train/gather-ahead.js';

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

export async function train(o: TrainRunOptions): Promise<TrainRunResult> {
  const { run, config: c } = o;
  const log = o.log ?? ((l: string) => process.stderr.write(l + '\n'));
  const events = o.progress ?? new ProgressLog(run.dir);
  if (c.maxStaleness > 0 && !o.rollout) {
    throw new McprlError('TRAIN_INVALID_CONFIG', `maxStaleness ${c.maxStaleness} (--max-staleness) needs rollout servers (--rollout-url): in-process, the engine cannot generate while it trains`);
  }
  let state = o.resume ? await run.readState() : null;
  // The run's commit point is state.json: a checkpoint newer than it is of a step that never completed (and before
  // step 0 completed, none is the run's), so it goes before the library resumes the model from its newest checkpoint.
  await run.pruneCheckpoints(state ? [state.step, state.bestStep] : []);
  // The policy is the library's model, kept in the run's own folder: its checkpoints are the run's. The run's chat
  // template variables reach every prompt the engine renders: rollouts and tokenisation alike.
  const backend = new LocalBackend({ dir: run.dir, modelDir: () => run.dir, device: c.device, ...(c.chatTemplateKwargs ? { chatTemplateKwargs: c.chatTemplateKwargs } : {}), ...(c.weightDtype ? { weightDtype: c.weightDtype } : {}), ...(c.prefixCacheMib !== undefined ? { prefixCacheMib: c.prefixCacheMib } : {}), ...(c.kvCacheMib !== undefined ? { kvCacheMib: c.kvCacheMib } : {}) });
  const policyModel = new TrainableModel({ project: 'mcprl', name: 'policy', baseModel: c.model, lora: { rank: c.rank, alpha: c.alpha, targets: c.targets, seed: c.seed } });
  let pool: RolloutPool | null = null;
  let ahead: GatherAhead<GatheredStep> | null = null;
  try {
    await policyModel.register(backend);
    if (policyModel.step !== (state?.step ?? 0)) {
      throw new McprlError('RUN_DIR', `${run.path('state.json')} names step ${state?.step ?? 0}, but the newest checkpoint is ${run.checkpoint(policyModel.step)}: restore ${run.checkpoint(state?.step ?? 0)}, or start a new run`);
    }
    const engine = backend.chatEngine(policyModel);
    const model = engine.model as Model;
    const local = new EnginePolicy(engine, { model: policyModel.inferenceName, maxTokens: c.maxTokens, samplerLogprobs: c.trainAtSamplingTemperature, constrainToolCalls: c.constrainToolCalls });
    // Rollouts on the servers (each serving the current adapter under its own name), or in-process.
    if (o.rollout) {
      // Training at the sampling temperature needs the sampler's own logprobs: mcprl's servers return them on
      // request (mcprl_sampler_logprobs); turns from servers that do not return them train at temperature 1
      // (the metric sampler_logprob_turns counts the turns that had them).
      const extraBody = { constrain_tool_calls: c.constrainToolCalls, ...(c.trainAtSamplingTemperature ? { mcprl_sampler_logprobs: true } : {}) };
      pool = new RolloutPool(o.rollout, { maxTokens: c.maxTokens, extraBody, log, events: o.rolloutEvents });
      await pool.publish(policyModel.step, checkpointAdapter(run.checkpoint(policyModel.step)));
    }
    const policy: Policy = pool ?? local;
    const metrics = await run.readMetrics(state?.step ?? -1);
    const curriculum = c.curriculum === 'pass_rate' ? new Curriculum(o.scenarios.train, state?.curriculum, { power: c.curriculumPower, retireAfter: c.curriculumRetireAfter }) : null;
    // On the servers, validation names the adapter it started on, whatever later gathers switch the pool to.
    const evaluate = (step: number) => heldOut(o, pool?.validates ? pool.at(pool.name) : local, 'val', step, events);
    const testSet = o.scenarios.test ?? [];
    const test = async (step: number, adapter: string) => {
      const t = await heldOut(o, new EnginePolicy(engine, { model: adapter, maxTokens: c.maxTokens, constrainToolCalls: c.constrainToolCalls }), 'test', step, events);
      if (t.lost !== null) log(`step ${step}: test not counted: ${t.lost}`);
      return t.lost === null ? t.success_rate : null;
    };
    // Every step is a step of the model, trained or not (alwaysStep), so the run's step numbers are the model's.
    const stepConfig: TrainStepConfigInput = {
      lr: c.lr, loss: c.loss, beta: c.beta, updates: c.updatesPerStep, lrSchedule: lrScheduleOf(c), alwaysStep: true,
      // The servers' logprobs are another engine's: weighed against the trainer's own log π (truncated IS).
      ...(pool ? { tisCap: c.tisCap } : {}),
    };

    // Scenarios whose checks name tools the server lacks are refused before any step (not scored as failures).
    await checkTargetTools(o.target, [...o.scenarios.train, ...o.scenarios.val, ...testSet], { policy: o.safety, timeoutMs: o.connectTimeoutMs });
    // The write tools the safety policy will refuse in every rollout, and the change that makes them run: one line.
    const refused = await refusedWrites(o.target, o.isolation ?? {}, { policy: o.safety, timeoutMs: o.connectTimeoutMs }).catch((err: unknown) => {
      if (err instanceof SandboxError) throw err;
      return undefined;
    });
    if (refused) log(refused);

    // Step 0: the untrained model (the adapter's B is zero, so it is the base model).
    if (!state) {
      const v = await inSpan('mcprl.train.step', { 'mcprl.step': 0 }, () => evaluate(0));
      // The baseline every later step is compared with: one that measured the infrastructure is no baseline.
      if (v.lost !== null) throw new McprlError('TRAIN_VALIDATION_INFRA', `validation of the untrained model (step 0): ${v.lost}; nothing was recorded`);
      const row: Record<string, unknown> = { step: 0, val_success: v.success_rate, val_mean_reward: v.mean_reward, val_tool_call_validity: v.tool_call_validity_rate, wall_s: { validate: v.duration_ms / 1000 } };
      if (testSet.length > 0) row.test_success = await test(0, policyModel.inferenceName);
      // maxSteps 0: step 0 is the run's last, so it reports as a last step does (the selected checkpoint is step 0).
      if (c.maxSteps === 0 && testSet.length > 0) Object.assign(row, { test_success_best: row.test_success, best_step: 0 });
      metrics.push(row);
      await run.writeMetrics(metrics);
      state = { step: 0, bestStep: 0, bestValSuccess: v.success_rate, evalsWithoutImprovement: 0, ...(c.maxSteps === 0 ? { stopped: 'max_steps' as const } : {}) };
      await run.commit(state);
      log(`step 0: validation success ${pct(v.success_rate)}` + (row.test_success !== undefined ? `, test success ${pct(row.test_success as number | null)}` : '') + ' (untrained)');
    }
    // Each step's row counts the servers' requests of that step alone (not step 0's validation).
    pool?.takeStats();
    const valBefore = (metrics.find((m) => m.step === 0)?.val_success as number) ?? 0;
    // Steps in a row whose every rollout was lost to infrastructure failures (see maxUntrainedSteps).
    let untrained = 0;
    // A step's groups, each trajectory with the step of the adapter that sampled it (rollout servers).
    const gatherFor = async (step: number, signal?: AbortSignal) => {
      const g = await gatherStep(o, policy, curriculum, step, events, signal);
      if (pool) for (const t of g.groups.flat()) recordPolicyStep(t, pool);
      o.asyncHooks?.onGathered?.(step);
      return g;
    };
    // Asynchronous rollouts: gathers run ahead of training, from the step after the adapter now served.
    if (c.maxStaleness > 0 && !state.stopped && state.step < c.maxSteps) {
      ahead = new GatherAhead(gatherFor, { published: state.step, last: c.maxSteps, ahead: o.asyncHooks?.gatherAhead ?? c.maxStaleness });
    }

    while (!state.stopped && state.step < c.maxSteps) {
      const step = state.step + 1;
      const wall: Record<string, number> = {};
      // The step's trace span (src/util/tracing.ts; a no-op unless traces are on) is the parent of its phases' spans.
      const stepSpan = startSpan('mcprl.train.step', { 'mcprl.step': step });
      const phase = async <T>(name: string, f: () => Promise<T>) => {
        const t0 = performance.now();
        const r = await withinSpan(stepSpan, f);
        wall[name] = (performance.now() - t0) / 1000;
        return r;
      };

      // gather + score (+ replace groups without signal); asynchronous: take the groups gathered ahead (wall_s.gather
      // is then the wait), and gather again, on the adapter trained now, any group sampled more than N steps before it
      const cacheBefore = model.prefixCacheStats();
      const gathered = await phase('gather', async () => {
        if (!ahead) return gatherFor(step);
        return regatherStale(o, pool!, await ahead.take(step), step, step - 1, events);
      });
      const cacheAfter = model.prefixCacheStats();
      if (curriculum) {
        for (const g of gathered.groups) if (g.length > 0) curriculum.record(g[0].scenario_id, trainable(g).length, trainable(g).filter(isSuccess).length, scoredAlike(c.loss, g));
      }
      pool?.ensureAlive(`step ${step}`);
      const groups = gathered.groups.map(trainable);
      const rollouts = gathered.groups.flat();
      const lost = rollouts.filter((t) => !trainableOne(t));
      // step, in the library: advantages → sequences from the exact sampled token ids → minibatches → optimiser
      // steps → checkpoint → the new adapter serves
      const trainGroups = groups.filter((g) => g.length > 0);
      const r = await phase('train', () => policyModel.train(trainGroups.map(libraryGroup), stepConfig, {
        onProgress: (e) => {
          if (e.phase === 'train') events.emit('train', step, e.done, e.total);
          if (e.phase === 'checkpoint' && e.done === 0) events.emit('checkpoint', step);
        },
      }));
      // checkpoint: the step's rollouts, with their advantages
      await phase('checkpoint', () => writeJsonlAtomic(run.trajectories(step), withAdvantages(rollouts, trainGroups, r.advantages)));
      // publish: the servers load this step's adapter and later rollouts use it
      if (pool) {
        await o.asyncHooks?.beforePublish?.(step);
        await phase('publish', () => pool!.publish(step, checkpointAdapter(run.checkpoint(step))));
        ahead?.published(step);
      }
      // evaluate
      const row: Record<string, unknown> = {
        step, train_reward: gathered.summary.mean_reward, reward_std: rewardStd(groups), train_success: gathered.summary.success_rate,
        tool_call_validity: gathered.summary.tool_call_validity_rate, groups: groups.length, groups_dropped_zero_variance: r.droppedGroups,
        unscored: gathered.summary.unscored_trajectories, judge_failures: gathered.summary.judge_failures, sequences: r.sequences,
        // Infrastructure failures (unscored or errored rollouts) apart from task failures (scored, not a success).
        infra_failures: lost.length, rollout_errors: rollouts.filter((t) => t.error !== undefined).length,
        // Calls whose outcome is unknown (connection lost mid-call): failures for the checks, counted apart.
        unknown_outcomes: rollouts.reduce((n, t) => n + (t.metrics.unknown_outcomes ?? 0), 0),
        task_failures: rollouts.filter((t) => trainableOne(t) && !isSuccess(t)).length,
        ...(c.resampleRounds > 0 ? { groups_replaced: gathered.replaced, resample_rounds: gathered.rounds, groups_trained: r.advantages.filter((a) => a !== null).length } : {}),
        ...(c.constrainToolCalls ? constrainMetrics(engine, gathered.groups, step === 1 ? log : null) : {}),
        ...(pool ? rolloutServerMetrics(pool, rollouts, r.tokenIdsDiffer, r.offPolicy) : {}),
        // The in-process engine's prefill during the gather: prompt tokens whose KV came from the prefix cache, and
        // prompt tokens computed (the servers' own are on their /metrics).
        ...(pool ? {} : { prefix_cache_hit_tokens: cacheAfter.hitTokens - cacheBefore.hitTokens, prefilled_tokens: cacheAfter.prefilledTokens - cacheBefore.prefilledTokens }),
        // Its KV cache (src/engine/kv-cache.ts): the budget, and the most its sequences and prefix blocks held at once
        // since it loaded.
        ...(pool ? {} : kvCacheMetrics(model.kvCacheStats())),
        ...(ahead ? stalenessMetrics(rollouts, step - 1, gathered.tooStale) : {}),
        ...(r.trained ? { loss: r.loss, policy_loss: r.policyLoss, kl: r.kl, clip_fraction: r.clipFraction, mean_ratio: r.meanRatio, entropy: r.entropy, grad_norm: r.gradNorm, trained_tokens: r.trainedTokens, tokens_per_s: r.tokensPerSecond, lr: r.lr } : {}),
      };
      const next: RunState = { ...state, step, ...(curriculum ? { curriculum: curriculum.state() } : {}) };
      if (step % c.evalEvery === 0 || step === c.maxSteps) {
        const v = await phase('validate', () => evaluate(step));
        if (v.lost !== null) {
          // Not a model result: recorded as missing, and neither a best step nor a step without improvement.
          Object.assign(row, { val_success: null, val_rollout_errors: v.rollout_errors });
          log(`step ${step}: validation not counted: ${v.lost}`);
        } else {
          Object.assign(row, { val_success: v.success_rate, val_mean_reward: v.mean_reward, val_tool_call_validity: v.tool_call_validity_rate });
          // The selected checkpoint: the best validation success; on a tie between trained steps the later one
          // (validation cannot tell them apart, and it trained on more), while a trained step must beat the
          // untrained model. Patience counts validations without a strict improvement.
          const improved = v.success_rate > state.bestValSuccess;
          if (improved || (v.success_rate === state.bestValSuccess && state.bestStep > 0)) Object.assign(next, { bestStep: step, bestValSuccess: v.success_rate });
          next.evalsWithoutImprovement = improved ? 0 : next.evalsWithoutImprovement + 1;
          if (next.evalsWithoutImprovement >= c.patience) next.stopped = 'patience';
        }
      }
      if (step >= c.maxSteps && !next.stopped) next.stopped = 'max_steps';
      // test (the run's last step only): this step's adapter, and the checkpoint validation selected
      if (next.stopped && testSet.length > 0) {
        await phase('test', async () => {
          row.test_success = await test(step, policyModel.inferenceName);
          row.test_success_best = await selectedOnTest(next.bestStep);
        });
        row.best_step = next.bestStep;
      }
      row.wall_s = wall;
      stepSpan.set(Object.fromEntries(Object.entries(row).filter(([, v]) => typeof v === 'number').map(([k, v]) => [`mcprl.${k}`, v as number])));
      stepSpan.end();
      metrics.push(row);
      await run.writeMetrics(metrics);
      await run.commit(next);
      // keep the latest checkpoint and the best by validation
      await policyModel.deleteCheckpoints({ best: next.bestStep });
      state = next;
      log(`step ${step}: reward ${fmt(row.train_reward)} ± ${fmt(row.reward_std)}, loss ${fmt(row.loss)}, kl ${fmt(row.kl)}, dropped ${r.droppedGroups}/${groups.length} groups` +
        (c.resampleRounds > 0 ? ` (${gathered.replaced} gathered to replace them)` : '') +
        (row.val_success !== undefined ? `, validation success ${pct(row.val_success as number)}` : '') +
        (row.test_success !== undefined ? `, test success ${pct(row.test_success as number | null)} (step ${step}), ${pct(row.test_success_best as number | null)} (best step ${next.bestStep})` : '') +
        ` (${Object.entries(wall).map(([k, s]) => `${k} ${s.toFixed(1)}s`).join(', ')})`);
      // Nothing trained because nothing could be scored: after maxUntrainedSteps such steps, stop loudly.
      untrained = r.sequences === 0 && lost.length === rollouts.length ? untrained + 1 : 0;
      if (untrained >= c.maxUntrainedSteps) {
        const why = lost[0]?.error ?? lost[0]?.unscored ?? 'no rollout';
        throw new McprlError('TRAIN_NOTHING_TRAINED', `steps ${step - untrained + 1}-${step} trained nothing: every rollout was lost to an infrastructure failure (first: ${why}); ` +
          `the run is kept at step ${step}: fix the cause, then continue it with --resume`);
      }
    }
    await ahead?.close();
    ahead = null;
    await pool?.close();
    pool = null;
    return { state, valBefore, valBest: state.bestValSuccess, bestStep: state.bestStep, test: testResult(metrics, state) };

    /** Test success of the best step's checkpoint: measured at step 0 for the untrained model, else loaded and run. */
    async function selectedOnTest(bestStep: number): Promise<number | null> {
      const known = metrics.find((m) => m.step === bestStep)?.test_success;
      if (typeof known === 'number') return known;
      if (bestStep === 0) return test(0, engine.modelName);
      await model.loadAdapter('selected', run.checkpoint(bestStep));
      try {
        return await test(bestStep, 'selected');
      } finally {
        model.unloadAdapter('selected');
      }
    }
  } finally {
    await ahead?.close().catch(() => undefined);
    await pool?.close().catch(() => undefined);
    await backend.close();
  }
}

/** A group of the step as the library takes it: each attempt's conversation, its tools and its reward. */
function libraryGroup(g: Trajectory[]): TrajectoryGroupInput {
  return { trajectories: g.map((t) => ({ messages: t.messages, tools: t.tools, reward: t.reward })), metadata: { scenario_id: g[0].scenario_id } };
}

/** The step's rollouts, each with the advantage it was trained with (null: not trained on). */
function withAdvantages(rollouts: Trajectory[], trainGroups: Trajectory[][], advantages: TrainResult['advantages']) {
  const of = new Map<Trajectory, number>();
  trainGroups.forEach((g, k) => advantages[k]?.forEach((a, i) => of.set(g[i], a)));
  return rollouts.map((t) => ({ ...t, advantage: of.get(t) ?? null }));
}

/**
 * A step's figures from the rollout servers: the pool's counters, the turns served and those without ids
 * (re-tokenised) or with the sampler's own logprobs, over every rollout; the turns whose ids the trainer's
 * tokenisation would not give, over the rollouts trained (measured while tokenising them); the off-policy mismatch.
 */
function rolloutServerMetrics(pool: RolloutPool, rollouts: Trajectory[], tokenIdsDiffer: number, off: TrainResult['offPolicy']): Record<string, number> {
  const turns = rollouts.flatMap((t) => t.messages.filter((m) => m.role === 'assistant'));
  return {
    ...pool.takeStats(), rollout_turns: turns.length, retokenized_turns: turns.filter((m) => !hasSampledIds(m)).length,
    token_ids_differ: tokenIdsDiffer, sampler_logprob_turns: turns.filter((m) => m.mcprl?.temperature !== undefined).length,
    ...(off ? { logprob_mismatch: off.logprobMismatch, logprob_mismatch_max: off.logprobMismatchMax, tis_truncated: off.tisTruncated, tis_weight_deviation: off.tisWeightDeviation, tokens_without_sampler_logprob: off.tokensWithoutSamplerLogprob } : {}),
  };
}

/** The scenarios of one step: a fresh seeded shuffle of the training set per epoch, so a resumed run picks the same ones. */
export function pickScenarios(all: Scenario[], n: number, seed: number, step: number): Scenario[] {
  const perEpoch = Math.max(1, Math.floor(all.length / n));
  const epoch = Math.floor((step - 1) / perEpoch);
  const order = createRng(seed * 7919 + epoch).shuffle([...all]);
  const start = ((step - 1) % perEpoch) * n;
  return Array.from({ length: Math.min(n, all.length) }, (_, i) => order[(start + i) % order.length]);
}

/**
 * How constrained decoding met the tools: tools whose schema it could not express (their arguments were only
 * held to be a JSON object) and samples that met a state allowing no token (decoded on unconstrained). Logged
 * in full once.
 */
function constrainMetrics(engine: ChatEngine, groups: Trajectory[][], log: ((line: string) => void) | null): Record<string, number> {
  const tools = groups.flat()[0]?.tools;
  if (!tools) return {};
  const r = engine.toolCallConstrainer(tools).report;
  if (log) {
    log(`constrained tool calls: ${r.constrained.length}/${tools.length} tools held to their schema` +
      (r.unsupported.length ? `; unsupported (arguments: any JSON object): ${r.unsupported.map((u) => `${u.tool} (${u.reason})`).join(', ')}` : '') +
      (r.relaxed.length ? `; not enforced: ${r.relaxed.map((x) => `${x.tool}: ${x.keywords.join(', ')}`).join('; ')}` : ''));
  }
  return { constrain_unsupported_tools: r.unsupported.length, constrain_relaxed_tools: r.relaxed.length, constrain_dead_ends: engine.constraintDeadEnds };
}

/** The learning-rate schedule of a run over all its optimiser steps (maxSteps × updatesPerStep). */
export function lrScheduleOf(c: TrainConfig): NonNullable<TrainStepConfigInput['lrSchedule']> {
  if (c.lrSchedule === 'constant' && c.warmupSteps === 0) return { kind: 'constant', warmupSteps: 0 };
  return { kind: c.lrSchedule === 'cosine' ? 'cosine' : 'warmup', warmupSteps: c.warmupSteps, totalSteps: c.maxSteps * c.updatesPerStep };
}

/** What one step gathered: every group (replaced ones included), their summary, and the dynamic-sampling counts. */
interface GatheredStep {
  groups: Trajectory[][];
  summary: Pick<EvalSummary, 'mean_reward' | 'success_rate' | 'tool_call_validity_rate' | 'unscored_trajectories' | 'judge_failures'>;
  /** Groups gathered to replace groups without signal. */
  replaced: number;
  /** Extra gathering rounds run. */
  rounds: number;
  /** Asynchronous rollouts: groups discarded as sampled more than maxStaleness steps before the adapter trained. */
  tooStale?: number;
}

/** A trajectory that counts for training: scored and without an infrastructure error. */
const trainableOne = (t: Trajectory) => !t.unscored && !t.error;
const trainable = (g: Trajectory[]) => g.filter(trainableOne);
/** Whether a group's scored attempts carry GRPO signal (their rewards differ), so that the step keeps it. */
const hasSignal = (loss: PolicyLoss, g: Trajectory[]) => advantagesFor(loss, [trainable(g).map((t) => t.reward)]).kept.length > 0;
/**
 * Whether a group's scored attempts all scored alike: the groups counted in groups_dropped_zero_variance, and those
 * that retire a scenario from the curriculum. A group with no scored attempt (all lost to infrastructure) is neither.
 */
const scoredAlike = (loss: PolicyLoss, g: Trajectory[]) => advantagesFor(loss, [trainable(g).map((t) => t.reward)]).droppedZeroVariance > 0;

/**
 * Gathers the step's groups; with resampleRounds, groups without signal are replaced by groups of scenarios not
 * yet used in this step, round after round, until the step has groupsPerStep groups with signal, no scenario is
 * left, or the rounds run out. The curriculum (when used) picks the scenarios; the step that trains on the groups
 * records their pass rates (so that a group gathered ahead, then lost to a kill, is not counted).
 */
async function gatherStep(o: TrainRunOptions, policy: Policy, curriculum: Curriculum | null, step: number, events: ProgressLog, signal?: AbortSignal): Promise<GatheredStep> {
  const c = o.config;
  const rng = createRng(c.seed * 7919 + step * 104729);
  const first = curriculum ? curriculum.pick(c.groupsPerStep, rng) : pickScenarios(o.scenarios.train, c.groupsPerStep, c.seed, step);
  const used = new Set(first.map((s) => s.id));
  const firstRound = await gatherGroups(o, policy, first, step, 0, events, signal);
  const groups = [...firstRound.groups];
  let replaced = 0;
  let rounds = 0;
  while (rounds < c.resampleRounds) {
    const missing = c.groupsPerStep - groups.filter((g) => hasSignal(c.loss, g)).length;
    if (missing <= 0) break;
    const more = curriculum
      ? curriculum.pick(missing, rng, used)
      : rng.shuffle(o.scenarios.train.filter((s) => !used.has(s.id))).slice(0, missing);
    if (more.length === 0) break;
    rounds++;
    for (const s of more) used.add(s.id);
    const r = await gatherGroups(o, policy, more, step, rounds, events, signal);
    groups.push(...r.groups);
    replaced += r.groups.length;
  }
  // One round: its own summary, as it is. Several: the same summary over every group gathered (`used` holds their
  // scenario ids in the groups' order).
  const summary = rounds === 0 ? firstRound.summary : summarizeEval(groups, [...used], {
    model: policy.name, reward: c.reward, judged: c.reward !== 'checks' && o.judge !== undefined, rolloutsPerGroup: c.rolloutsPerGroup,
  });
  return { groups, summary, replaced, rounds };
}

/**
 * Asynchronous rollouts: the step's groups with every group sampled more than maxStaleness adapters before
 * `trained` (the adapter this step trains) replaced by one of the same scenario gathered now, on the adapter the
 * servers serve (`trained` itself: the trainer publishes nothing while it waits here). Counted in `tooStale`.
 */
async function regatherStale(o: TrainRunOptions, policy: RolloutPool, g: GatheredStep, step: number, trained: number, events: ProgressLog): Promise<GatheredStep> {
  const c = o.config;
  const stale = g.groups.flatMap((group, i) => (staleOf(group, trained) > c.maxStaleness ? [i] : []));
  if (stale.length === 0) return { ...g, tooStale: 0 };
  const byId = new Map(o.scenarios.train.map((s) => [s.id, s]));
  // A round number of its own, past the resampling rounds, so that the seeds differ from the discarded group's.
  const again = await gatherGroups(o, policy, stale.map((i) => byId.get(g.groups[i][0].scenario_id)!), step, c.resampleRounds + 1, events);
  for (const t of again.groups.flat()) recordPolicyStep(t, policy);
  const groups = [...g.groups];
  stale.forEach((i, k) => (groups[i] = again.groups[k]));
  const summary = summarizeEval(groups, groups.map((x) => x[0].scenario_id), {
    model: policy.name, reward: c.reward, judged: c.reward !== 'checks' && o.judge !== undefined, rolloutsPerGroup: c.rolloutsPerGroup,
  });
  return { ...g, groups, summary, tooStale: stale.length };
}

/** Sets the trajectory's policy_step: the step of the oldest adapter among those that answered its turns. */
function recordPolicyStep(t: Trajectory, pool: RolloutPool): void {
  const steps = (t.sampled_by ?? []).map((name) => pool.stepOf(name)).filter((x): x is number => x !== undefined);
  if (steps.length > 0) t.policy_step = Math.min(...steps);
}

/**
 * A step's staleness figures: over its rollouts with a recorded policy step, how many adapters older than `trained`
 * their oldest turn's was (mean, max); the groups discarded as too stale.
 */
function stalenessMetrics(rollouts: Trajectory[], trained: number, tooStale: number | undefined): Record<string, number> {
  const st = rollouts.filter((t) => t.policy_step !== undefined).map((t) => trained - t.policy_step!);
  return { staleness_mean: st.length ? st.reduce((a, b) => a + b, 0) / st.length : 0, staleness_max: st.length ? Math.max(...st) : 0, groups_too_stale: tooStale ?? 0 };
}

async function gatherGroups(o: TrainRunOptions, policy: Policy, scenarios: Scenario[], step: number, round: number, events: ProgressLog, signal?: AbortSignal) {
  const c = o.config;
  const bar = events.phase('gather', step, scenarios.length * c.rolloutsPerGroup);
  // Groups are scored as their rollouts come in; scoring is reported as its own phase once every rollout is in.
  let scoring: PhaseProgress | undefined;
  let scored = 0;
  return runEval({
    policy, target: o.target, scenarios, reward: c.reward, judge: o.judge, rolloutsPerGroup: c.rolloutsPerGroup,
    concurrency: c.concurrency, policyForSafety: o.safety, ...o.isolation, connectTimeoutMs: o.connectTimeoutMs, maxTurns: c.maxTurns, temperature: c.temperature,
    seed: c.seed * 100003 + step * 1009 + round * 7919, ...(signal ? { signal } : {}), judgeCacheDir: o.run.path('judge-cache'), judgeRetryBudgetMs: c.judge?.retryBudgetMs,
    onTrajectory: (_t, done, total) => {
      bar.update(done);
      if (done === total) (scoring = events.phase('score', step, scenarios.length)).update(scored);
    },
    onGroupScored: (done) => scoring?.update((scored = done)),
  });
}

/**
 * Why a held-out figure measures the infrastructure rather than the model — more than half its rollouts ended in
 * an infrastructure error — or null when it is a model result.
 */
export function lostToInfrastructure(groups: Trajectory[][]): string | null {
  const all = groups.flat();
  const errors = all.filter((t) => t.error !== undefined);
  if (errors.length * 2 <= all.length) return null;
  return `${errors.length} of ${all.length} rollouts failed on infrastructure, not on the task (first: ${errors[0].error})`;
}

/**
 * Validation or test: greedy by default, checks reward, trajectories kept as trajectories/{val,test}-NNNN.jsonl.
 * `lost` says why the figure is not a model result (see lostToInfrastructure), else null.
 */
async function heldOut(o: TrainRunOptions, policy: Policy, set: 'val' | 'test', step: number, events: ProgressLog): Promise<EvalSummary & { lost: string | null }> {
  const c = o.config;
  const scenarios = o.scenarios[set] ?? [];
  const bar = events.phase(set === 'val' ? 'validate' : 'test', step, scenarios.length * c.valRollouts);
  const { groups, summary } = await runEval({
    policy, target: o.target, scenarios, reward: 'checks', rolloutsPerGroup: c.valRollouts,
    concurrency: c.concurrency, policyForSafety: o.safety, ...o.isolation, connectTimeoutMs: o.connectTimeoutMs, maxTurns: c.maxTurns, temperature: c.valTemperature,
    seed: c.seed, onTrajectory: (_t, done) => bar.update(done),
  });
  await writeJsonlAtomic(set === 'val' ? o.run.valTrajectories(step) : o.run.testTrajectories(step), groups.flat());
  return { ...summary, lost: lostToInfrastructure(groups) };
}

/** The test figures of a finished run, from its metrics (null when it has no test set or has not finished). */
export function testResult(metrics: Record<string, unknown>[], state: RunState): TrainRunResult['test'] {
  const before = metrics.find((m) => m.step === 0)?.test_success;
  const last = metrics.find((m) => m.step === state.step);
  if (typeof before !== 'number' || typeof last?.test_success !== 'number' || typeof last.test_success_best !== 'number') return null;
  return { before, best: last.test_success_best, last: last.test_success, lastStep: state.step };
}

function rewardStd(groups: Trajectory[][]): number {
  const stds = groups.filter((g) => g.length > 1).map((g) => {
    const mean = g.reduce((a, t) => a + t.reward, 0) / g.length;
    return Math.sqrt(g.reduce((a, t) => a + (t.reward - mean) ** 2, 0) / g.length);
  });
  return stds.length ? stds.reduce((a, b) => a + b, 0) / stds.length : 0;
}

const pct = (x: number | null) => (x === null ? 'not counted' : `${(x * 100).toFixed(1)}%`);
const fmt = (x: unknown) => (typeof x === 'number' ? x.toFixed(3) : '–');

/** The in-process engine's KV cache figures of a metrics row. */
function kvCacheMetrics(s: KvCacheStats): Record<string, number> {
  return { kv_cache_budget_bytes: s.budgetBytes, kv_cache_peak_bytes: s.peakBytes, kv_cache_peak_sequences: s.peakSlots };
}
