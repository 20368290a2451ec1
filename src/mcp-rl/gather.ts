/**
 * The groups of a training step, and the held-out sets: scenarios picked (a seeded shuffle or the curriculum), K
 * rollouts each, scored; groups without signal replaced (DAPO's dynamic sampling, with `resampleRounds`), and with
 * asynchronous rollouts, groups sampled by too old an adapter gathered again.
 */
import { runEval, summarizeEval, type EvalSummary } from '../eval/evaluate.js';
import type { Policy } from '../agent/policy.js';
import type { McpTrajectory } from '../agent/trajectory.js';
import type { Scenario } from '../scenarios/scenario.js';
import { writeJsonlAtomic } from '../util/atomic.js';
import { createRng } from '../util/rng.js';
import { advantagesFor } from '../train/advantages.js';
import type { PolicyLoss } from '../train/config.js';
import type { Curriculum } from '../train/curriculum.js';
import type { PhaseProgress, ProgressLog } from '../train/progress-log.js';
import type { RolloutPool } from '../train/rollout-pool.js';
import { staleOf } from '../train/gather-ahead.js';
import type { TrainRunOptions } from './train.js';

/** The scenarios of one step: a fresh seeded shuffle of the training set per epoch, so a resumed run picks the same ones. */
export function pickScenarios(all: Scenario[], n: number, seed: number, step: number): Scenario[] {
  const perEpoch = Math.max(1, Math.floor(all.length / n));
  const epoch = Math.floor((step - 1) / perEpoch);
  const order = createRng(seed * 7919 + epoch).shuffle([...all]);
  const start = ((step - 1) % perEpoch) * n;
  return Array.from({ length: Math.min(n, all.length) }, (_, i) => order[(start + i) % order.length]);
}

/** What one step gathered: every group (replaced ones included), their summary, and the dynamic-sampling counts. */
export interface GatheredStep {
  groups: McpTrajectory[][];
  summary: Pick<EvalSummary, 'mean_reward' | 'success_rate' | 'tool_call_validity_rate' | 'unscored_trajectories' | 'judge_failures'>;
  /** Groups gathered to replace groups without signal. */
  replaced: number;
  /** Extra gathering rounds run. */
  rounds: number;
  /** Asynchronous rollouts: groups discarded as sampled more than maxStaleness steps before the adapter trained. */
  tooStale?: number;
}

/** A trajectory that counts for training: scored and without an infrastructure error. */
export const trainableOne = (t: McpTrajectory) => !t.unscored && !t.error;
export const trainable = (g: McpTrajectory[]) => g.filter(trainableOne);
/** Whether a group's scored attempts carry GRPO signal (their rewards differ), so that the step keeps it. */
const hasSignal = (loss: PolicyLoss, g: McpTrajectory[]) => advantagesFor(loss, [trainable(g).map((t) => t.reward)]).kept.length > 0;
/**
 * Whether a group's scored attempts all scored alike: the groups counted in groups_dropped_zero_variance, and those
 * that retire a scenario from the curriculum. A group with no scored attempt (all lost to infrastructure) is neither.
 */
export const scoredAlike = (loss: PolicyLoss, g: McpTrajectory[]) => advantagesFor(loss, [trainable(g).map((t) => t.reward)]).droppedZeroVariance > 0;

/**
 * Gathers the step's groups; with resampleRounds, groups without signal are replaced by groups of scenarios not
 * yet used in this step, round after round, until the step has groupsPerStep groups with signal, no scenario is
 * left, or the rounds run out. The curriculum (when used) picks the scenarios; the step that trains on the groups
 * records their pass rates (so that a group gathered ahead, then lost to a kill, is not counted).
 */
export async function gatherStep(o: TrainRunOptions, policy: Policy, curriculum: Curriculum | null, step: number, events: ProgressLog, signal?: AbortSignal): Promise<GatheredStep> {
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
export async function regatherStale(o: TrainRunOptions, policy: RolloutPool, g: GatheredStep, step: number, trained: number, events: ProgressLog): Promise<GatheredStep> {
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
export function recordPolicyStep(t: McpTrajectory, pool: RolloutPool): void {
  const steps = (t.sampled_by ?? []).map((name) => pool.stepOf(name)).filter((x): x is number => x !== undefined);
  if (steps.length > 0) t.policy_step = Math.min(...steps);
}

/**
 * One round of the step's groups on `policy` (made at the training temperature: see train.ts): K rollouts of each
 * scenario, scored, with the gather and score phases' progress.
 */
async function gatherGroups(o: TrainRunOptions, policy: Policy, scenarios: Scenario[], step: number, round: number, events: ProgressLog, signal?: AbortSignal) {
  const c = o.config;
  const bar = events.phase('gather', step, scenarios.length * c.rolloutsPerGroup);
  // Groups are scored as their rollouts come in; scoring is reported as its own phase once every rollout is in.
  let scoring: PhaseProgress | undefined;
  let scored = 0;
  return runEval({
    policy, target: o.target, scenarios, reward: c.reward, judge: o.judge, rolloutsPerGroup: c.rolloutsPerGroup,
    concurrency: c.concurrency, policyForSafety: o.safety, ...o.isolation, connectTimeoutMs: o.connectTimeoutMs, maxTurns: c.maxTurns,
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
export function lostToInfrastructure(groups: McpTrajectory[][]): string | null {
  const all = groups.flat();
  const errors = all.filter((t) => t.error !== undefined);
  if (errors.length * 2 <= all.length) return null;
  return `${errors.length} of ${all.length} rollouts failed on infrastructure, not on the task (first: ${errors[0].error})`;
}

/**
 * Validation or test on `policy` (made at valTemperature, greedy by default: see train.ts), checks reward,
 * trajectories kept as trajectories/{val,test}-NNNN.jsonl.
 * `lost` says why the figure is not a model result (see lostToInfrastructure), else null.
 */
export async function heldOut(o: TrainRunOptions, policy: Policy, set: 'val' | 'test', step: number, events: ProgressLog): Promise<EvalSummary & { lost: string | null }> {
  const c = o.config;
  const scenarios = o.scenarios[set] ?? [];
  const bar = events.phase(set === 'val' ? 'validate' : 'test', step, scenarios.length * c.valRollouts);
  const { groups, summary } = await runEval({
    policy, target: o.target, scenarios, reward: 'checks', rolloutsPerGroup: c.valRollouts,
    concurrency: c.concurrency, policyForSafety: o.safety, ...o.isolation, connectTimeoutMs: o.connectTimeoutMs, maxTurns: c.maxTurns,
    seed: c.seed, onTrajectory: (_t, done) => bar.update(done),
  });
  await writeJsonlAtomic(set === 'val' ? o.run.valTrajectories(step) : o.run.testTrajectories(step), groups.flat());
  return { ...summary, lost: lostToInfrastructure(groups) };
}
