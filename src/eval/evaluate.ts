import { existsSync } from 'node:fs';
import { appendFile, mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import pLimit from 'p-limit';
import { blendRewards, resolveRewardMode, type RewardMode } from '../ruler/blend.js';
import { scoreChecks } from '../ruler/checks.js';
import type { JudgeClient } from '../ruler/judge.js';
import { rulerScores } from '../ruler/ruler.js';
import { rolloutGroups, type RolloutGroupsOptions } from '../agent/rollout-groups.js';
import { McpTrajectorySchema, type McpTrajectory } from '../agent/trajectory.js';
import { writeFileAtomic, WriteError } from '../util/atomic.js';
import { McprlError } from '../util/errors.js';
import type { TraceSpan } from '../util/tracing.js';

/** Everything rolloutGroups takes, plus how the groups are scored. */
export interface EvalOptions extends RolloutGroupsOptions {
  /** How rewards are computed; see blendRewards. */
  reward: RewardMode;
  /** Needed for `ruler` and `blend`. */
  judge?: JudgeClient;
  rubric?: string;
  /** Weight of RULER in `blend`. Default 0.5. */
  rulerWeight?: number;
  /** Folder for cached judge answers. Default: none. */
  judgeCacheDir?: string;
  /** Judge retries per group. Default 3. */
  judgeMaxRetries?: number;
  /** Time one group may spend on the judge, retries and waits included (ms). Default: src/ruler's. */
  judgeRetryBudgetMs?: number;
  /** Called as each group is scored (for progress output). */
  onGroupScored?: (done: number, total: number) => void;
  /**
   * Called with each group once it is scored (as soon as its own rollouts are in, not after every group's), and
   * awaited before runEval returns: `mcprl eval` appends it to its output here. Not called for groups cut short
   * by `signal`.
   */
  onGroupDone?: (group: McpTrajectory[], index: number) => Promise<void> | void;
}

/** What `mcprl eval` reports, and writes as summary.json. */
export interface EvalSummary {
  model: string;
  reward_mode: RewardMode;
  scenarios: number;
  rollouts_per_group: number;
  trajectories: number;
  /** Fraction of trajectories that completed without error and passed all their scenario's checks. */
  success_rate: number;
  successes: number;
  /** Mean reward over scored trajectories (null when none could be scored). */
  mean_reward: number | null;
  /** 1 − invalid calls / tool calls, over all trajectories (1 when no call was made). */
  tool_call_validity_rate: number;
  tool_calls: number;
  invalid_calls: number;
  tool_errors: number;
  /**
   * Calls whose outcome is unknown (the connection was lost, or the call timed out or was cancelled while it ran):
   * they count as failures (no check passes on them), and are counted here so that a flaky target shows.
   */
  unknown_outcomes: number;
  mean_turns: number;
  completed_rate: number;
  ran_out_of_turns: number;
  /** Groups the judge was asked to score, and how many of them it failed on (skipped, not zeroed). */
  judge_groups: number;
  judge_failures: number;
  unscored_trajectories: number;
  /** Rollouts ended by an infrastructure failure (policy unreachable, timeout, connection). */
  rollout_errors: number;
  duration_ms: number;
  per_scenario: { scenario_id: string; success_rate: number; mean_reward: number | null }[];
  /** Set when `mcprl eval` was interrupted: the signal. The figures then cover the finished scenarios alone. */
  interrupted?: string;
  /** Scenarios asked for (the finished ones are `scenarios`); set when interrupted. */
  scenarios_requested?: number;
}

/** A trajectory counts as a success when it completed, had no error, and passed every check it has. */
export function isSuccess(t: McpTrajectory): boolean {
  const checksOk = (t.metrics.checks_total ?? 0) === 0 || t.metrics.checks_passed === t.metrics.checks_total;
  return t.metrics.completed && t.error === undefined && checksOk;
}

const mean = (xs: number[]): number | null => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);

/**
 * Rolls out every scenario K times, scores each group (checks, RULER, blend) and summarises. The group-level
 * judge calls run concurrently too, under the same concurrency bound.
 */
export async function runEval(opts: EvalOptions): Promise<{ groups: McpTrajectory[][]; summary: EvalSummary }> {
  const started = performance.now();
  const needsJudge = resolveRewardMode(opts.reward, opts.judge !== undefined) !== 'checks';

  // gather, and score each group as soon as its rollouts are in
  let scoredGroups = 0;
  const limit = pLimit(Math.max(1, opts.concurrency));
  const scoring: Promise<void>[] = [];
  const score = async (group: McpTrajectory[], i: number, cut: boolean, spans: TraceSpan[]) => {
    try {
      await scoreGroup(group, i, cut);
    } finally {
      // The rollouts' trace spans end once their rewards are known.
      group.forEach((t, k) => {
        spans[k]?.set({ 'mcprl.reward': t.unscored ? undefined : t.reward, 'mcprl.reward.checks': t.reward_components.checks, 'mcprl.reward.ruler': t.reward_components.ruler, 'mcprl.unscored': t.unscored });
        spans[k]?.end();
      });
    }
  };
  const scoreGroup = async (group: McpTrajectory[], i: number, cut: boolean) => {
    const scenario = opts.scenarios[i];
    const checks = (scenario.checks?.length ?? 0) > 0 ? group.map((t) => scoreChecks(t, scenario)) : undefined;
    let ruler: Awaited<ReturnType<typeof rulerScores>> | undefined;
    if (needsJudge && opts.judge) {
      ruler = await rulerScores(group, {
        judge: opts.judge,
        rubric: opts.rubric,
        cacheDir: opts.judgeCacheDir,
        maxRetries: opts.judgeMaxRetries,
        retryBudgetMs: opts.judgeRetryBudgetMs,
      });
      if ('skipped' in ruler) {
        for (const t of group) t.logs.push(`ruler: group skipped: ${ruler.reason}`);
      } else {
        const r = ruler;
        group.forEach((t, k) => t.logs.push(`ruler: score ${r.scores[k]}: ${r.explanations[k]}`));
      }
    }
    blendRewards(group, { mode: opts.reward, ruler, checks, rulerWeight: opts.rulerWeight });
    opts.onGroupScored?.(++scoredGroups, opts.scenarios.length);
    if (!cut) await opts.onGroupDone?.(group, i);
  };
  const groups = await rolloutGroups({ ...opts, onGroup: (group, i, spans) => {
    // A group whose rollouts came in after the signal aborted them is cut short, not finished.
    const cut = opts.signal?.aborted ?? false;
    scoring.push(limit(() => score(group, i, cut, spans)));
  } });
  await Promise.all(scoring);

  const summary = summarizeEval(groups, opts.scenarios.map((s) => s.id), { model: opts.policy.name, reward: opts.reward, judged: needsJudge && opts.judge !== undefined, rolloutsPerGroup: opts.rolloutsPerGroup });
  summary.duration_ms = Math.round(performance.now() - started);
  return { groups, summary };
}

/**
 * The summary of scored groups (groups[i] holds the attempts at scenario scenarioIds[i]). `judged`: the judge was
 * asked for every group, so a group without a RULER component is one the judge failed on.
 */
export function summarizeEval(
  groups: McpTrajectory[][],
  scenarioIds: string[],
  meta: { model: string; reward: RewardMode; judged: boolean; rolloutsPerGroup: number; durationMs?: number },
): EvalSummary {
  const all = groups.flat();
  const scored = all.filter((t) => t.unscored === undefined);
  const toolCalls = all.reduce((s, t) => s + t.metrics.tool_calls, 0);
  const invalid = all.reduce((s, t) => s + t.metrics.invalid_calls, 0);
  const successes = all.filter(isSuccess).length;
  return {
    model: meta.model,
    reward_mode: meta.reward,
    scenarios: scenarioIds.length,
    rollouts_per_group: meta.rolloutsPerGroup,
    trajectories: all.length,
    success_rate: all.length ? successes / all.length : 0,
    successes,
    mean_reward: mean(scored.map((t) => t.reward)),
    tool_call_validity_rate: toolCalls ? 1 - invalid / toolCalls : 1,
    tool_calls: toolCalls,
    invalid_calls: invalid,
    tool_errors: all.reduce((s, t) => s + t.metrics.tool_errors, 0),
    unknown_outcomes: all.reduce((s, t) => s + (t.metrics.unknown_outcomes ?? 0), 0),
    mean_turns: mean(all.map((t) => t.metrics.turns)) ?? 0,
    completed_rate: all.length ? all.filter((t) => t.metrics.completed).length / all.length : 0,
    ran_out_of_turns: all.filter((t) => t.metrics.ran_out_of_turns).length,
    judge_groups: meta.judged ? groups.length : 0,
    judge_failures: meta.judged ? groups.filter((g) => g.length > 0 && g[0].reward_components.ruler === undefined).length : 0,
    unscored_trajectories: all.length - scored.length,
    rollout_errors: all.filter((t) => t.error !== undefined).length,
    duration_ms: meta.durationMs ?? 0,
    per_scenario: groups.map((g, i) => ({
      scenario_id: scenarioIds[i],
      success_rate: g.length ? g.filter(isSuccess).length / g.length : 0,
      mean_reward: mean(g.filter((t) => t.unscored === undefined).map((t) => t.reward)),
    })),
  };
}

/** Writes `trajectories.jsonl` (one trajectory per line, groups in scenario order) and `summary.json`. */
export async function writeEvalOutput(dir: string, groups: McpTrajectory[][], summary: EvalSummary): Promise<{ trajectories: string; summary: string }> {
  await mkdir(dir, { recursive: true });
  const trajectories = path.join(dir, 'trajectories.jsonl');
  const summaryFile = path.join(dir, 'summary.json');
  const lines = groups.flat().map((t) => JSON.stringify(t));
  await writeFileAtomic(trajectories, lines.join('\n') + (lines.length ? '\n' : ''));
  await writeFileAtomic(summaryFile, `${JSON.stringify(summary, null, 2)}\n`);
  return { trajectories, summary: summaryFile };
}

/**
 * An eval's output folder as it fills: trajectories.jsonl gains each group as soon as it is scored (one append per
 * group, appends serialised), so an interrupted eval keeps every finished group; summary.json is written last.
 * A resumed eval keeps the finished groups of the file — those with all their rollouts — and runs the rest.
 */
export class EvalOutputDir {
  readonly trajectories: string;
  readonly summary: string;
  private appends: Promise<void> = Promise.resolve();

  private constructor(readonly dir: string) {
    this.trajectories = path.join(dir, 'trajectories.jsonl');
    this.summary = path.join(dir, 'summary.json');
  }

  /**
   * Opens `dir` for a new eval (refused when it already holds trajectories: they are not this eval's to
   * overwrite), or with `resume` for the rest of one: returns the finished groups by scenario id. A line cut
   * short by a kill, and groups missing rollouts, are dropped from the file.
   */
  static async open(dir: string, o: { resume: boolean; rolloutsPerGroup: number }): Promise<{ out: EvalOutputDir; finished: Map<string, McpTrajectory[]> }> {
    const out = new EvalOutputDir(dir);
    const finished = new Map<string, McpTrajectory[]>();
    await mkdir(dir, { recursive: true });
    const text = existsSync(out.trajectories) ? await readFile(out.trajectories, 'utf8') : '';
    if (!o.resume) {
      if (text.trim() !== '') throw new McprlError('EVAL_OUT_EXISTS', `${out.trajectories} already holds trajectories: pass --resume to finish that eval, or choose another --out`);
      await writeFileAtomic(out.trajectories, '');
      return { out, finished };
    }
    const byScenario = new Map<string, McpTrajectory[]>();
    for (const line of text.split('\n')) {
      if (line.trim() === '') continue;
      let parsed;
      try {
        parsed = McpTrajectorySchema.safeParse(JSON.parse(line));
      } catch {
        continue;
      }
      if (!parsed.success) continue;
      const t = parsed.data as McpTrajectory;
      byScenario.set(t.scenario_id, [...(byScenario.get(t.scenario_id) ?? []), t]);
    }
    for (const [id, g] of byScenario) if (g.length === o.rolloutsPerGroup) finished.set(id, g);
    await writeFileAtomic(out.trajectories, [...finished.values()].flat().map((t) => JSON.stringify(t) + '\n').join(''));
    return { out, finished };
  }

  /** Appends a scored group (its lines in one write, after the appends before it). */
  append(group: McpTrajectory[]): Promise<void> {
    const text = group.map((t) => JSON.stringify(t) + '\n').join('');
    this.appends = this.appends.then(() => appendFile(this.trajectories, text).catch((e: unknown) => {
      throw new WriteError(this.trajectories, e);
    }));
    return this.appends;
  }

  async writeSummary(summary: EvalSummary): Promise<void> {
    await this.appends;
    await writeFileAtomic(this.summary, `${JSON.stringify(summary, null, 2)}\n`);
  }
}

/** Human-readable summary lines for the terminal. */
export function formatEvalSummary(s: EvalSummary): string {
  const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
  return [
    `model ${s.model}: ${s.trajectories} rollouts (${s.scenarios} scenarios × ${s.rollouts_per_group}), reward ${s.reward_mode}`,
    `  success rate        ${pct(s.success_rate)}  (${s.successes}/${s.trajectories} completed with all checks passed)`,
    `  mean reward         ${s.mean_reward === null ? 'n/a' : s.mean_reward.toFixed(3)}${s.unscored_trajectories ? `  (${s.unscored_trajectories} unscored)` : ''}`,
    `  tool-call validity  ${pct(s.tool_call_validity_rate)}  (${s.tool_calls - s.invalid_calls}/${s.tool_calls} calls valid, ${s.tool_errors} tool errors${s.unknown_outcomes ? `, ${s.unknown_outcomes} with unknown outcome (counted as failed)` : ''})`,
    `  mean turns          ${s.mean_turns.toFixed(2)}  (${s.ran_out_of_turns} ran out of turns)`,
    `  judge failures      ${s.judge_failures} of ${s.judge_groups} groups`,
    `  rollout errors      ${s.rollout_errors}`,
    ...(s.interrupted ? [`  interrupted by ${s.interrupted}: ${s.scenarios} of ${s.scenarios_requested} scenarios finished (rerun with --resume for the rest)`] : []),
  ].join('\n');
}
