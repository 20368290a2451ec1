import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import pLimit from 'p-limit';
import { blendRewards, resolveRewardMode, type RewardMode } from '../ruler/blend.js';
import { scoreChecks } from '../ruler/checks.js';
import type { JudgeClient } from '../ruler/judge.js';
import { rulerScoreGroup } from '../ruler/ruler.js';
import { rolloutGroups, type RolloutGroupsOptions } from '../agent/rollout.js';
import type { Trajectory } from '../agent/trajectory.js';
import { writeFileAtomic } from '../util/atomic.js';

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
  /** Called as each group is scored (for progress output). */
  onGroupScored?: (done: number, total: number) => void;
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
}

/** A trajectory counts as a success when it completed, had no error, and passed every check it has. */
export function isSuccess(t: Trajectory): boolean {
  const checksOk = (t.metrics.checks_total ?? 0) === 0 || t.metrics.checks_passed === t.metrics.checks_total;
  return t.metrics.completed && t.error === undefined && checksOk;
}

const mean = (xs: number[]): number | null => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);

/**
 * Rolls out every scenario K times, scores each group (checks, RULER, blend) and summarises. The group-level
 * judge calls run concurrently too, under the same concurrency bound.
 */
export async function runEval(opts: EvalOptions): Promise<{ groups: Trajectory[][]; summary: EvalSummary }> {
  const started = performance.now();
  const needsJudge = resolveRewardMode(opts.reward, opts.judge !== undefined) !== 'checks';

  // gather
  const groups = await rolloutGroups(opts);

  // score
  let judgeGroups = 0;
  let scoredGroups = 0;
  let judgeFailures = 0;
  const limit = pLimit(Math.max(1, opts.concurrency));
  await Promise.all(
    groups.map((group, i) =>
      limit(async () => {
        const scenario = opts.scenarios[i];
        const checks = (scenario.checks?.length ?? 0) > 0 ? group.map((t) => scoreChecks(t, scenario)) : undefined;
        let ruler: Awaited<ReturnType<typeof rulerScoreGroup>> | undefined;
        if (needsJudge && opts.judge) {
          judgeGroups++;
          ruler = await rulerScoreGroup(group, {
            judge: opts.judge,
            rubric: opts.rubric,
            cacheDir: opts.judgeCacheDir,
            maxRetries: opts.judgeMaxRetries,
          });
          if ('skipped' in ruler) {
            judgeFailures++;
            for (const t of group) t.logs.push(`ruler: group skipped: ${ruler.reason}`);
          } else {
            const r = ruler;
            group.forEach((t, k) => t.logs.push(`ruler: score ${r.scores[k]}: ${r.explanations[k]}`));
          }
        }
        blendRewards(group, { mode: opts.reward, ruler, checks, rulerWeight: opts.rulerWeight });
        opts.onGroupScored?.(++scoredGroups, groups.length);
      }),
    ),
  );

  // summarise
  const all = groups.flat();
  const scored = all.filter((t) => t.unscored === undefined);
  const toolCalls = all.reduce((s, t) => s + t.metrics.tool_calls, 0);
  const invalid = all.reduce((s, t) => s + t.metrics.invalid_calls, 0);
  const successes = all.filter(isSuccess).length;
  const summary: EvalSummary = {
    model: opts.policy.name,
    reward_mode: opts.reward,
    scenarios: opts.scenarios.length,
    rollouts_per_group: opts.rolloutsPerGroup,
    trajectories: all.length,
    success_rate: all.length ? successes / all.length : 0,
    successes,
    mean_reward: mean(scored.map((t) => t.reward)),
    tool_call_validity_rate: toolCalls ? 1 - invalid / toolCalls : 1,
    tool_calls: toolCalls,
    invalid_calls: invalid,
    tool_errors: all.reduce((s, t) => s + t.metrics.tool_errors, 0),
    mean_turns: mean(all.map((t) => t.metrics.turns)) ?? 0,
    completed_rate: all.length ? all.filter((t) => t.metrics.completed).length / all.length : 0,
    ran_out_of_turns: all.filter((t) => t.metrics.ran_out_of_turns).length,
    judge_groups: judgeGroups,
    judge_failures: judgeFailures,
    unscored_trajectories: all.length - scored.length,
    rollout_errors: all.filter((t) => t.error !== undefined).length,
    duration_ms: Math.round(performance.now() - started),
    per_scenario: groups.map((g, i) => ({
      scenario_id: opts.scenarios[i].id,
      success_rate: g.length ? g.filter(isSuccess).length / g.length : 0,
      mean_reward: mean(g.filter((t) => t.unscored === undefined).map((t) => t.reward)),
    })),
  };
  return { groups, summary };
}

/** Writes `trajectories.jsonl` (one trajectory per line, groups in scenario order) and `summary.json`. */
export async function writeEvalOutput(dir: string, groups: Trajectory[][], summary: EvalSummary): Promise<{ trajectories: string; summary: string }> {
  await mkdir(dir, { recursive: true });
  const trajectories = path.join(dir, 'trajectories.jsonl');
  const summaryFile = path.join(dir, 'summary.json');
  const lines = groups.flat().map((t) => JSON.stringify(t));
  await writeFileAtomic(trajectories, lines.join('\n') + (lines.length ? '\n' : ''));
  await writeFileAtomic(summaryFile, `${JSON.stringify(summary, null, 2)}\n`);
  return { trajectories, summary: summaryFile };
}

/** Human-readable summary lines for the terminal. */
export function formatEvalSummary(s: EvalSummary): string {
  const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
  return [
    `model ${s.model}: ${s.trajectories} rollouts (${s.scenarios} scenarios × ${s.rollouts_per_group}), reward ${s.reward_mode}`,
    `  success rate        ${pct(s.success_rate)}  (${s.successes}/${s.trajectories} completed with all checks passed)`,
    `  mean reward         ${s.mean_reward === null ? 'n/a' : s.mean_reward.toFixed(3)}${s.unscored_trajectories ? `  (${s.unscored_trajectories} unscored)` : ''}`,
    `  tool-call validity  ${pct(s.tool_call_validity_rate)}  (${s.tool_calls - s.invalid_calls}/${s.tool_calls} calls valid, ${s.tool_errors} tool errors)`,
    `  mean turns          ${s.mean_turns.toFixed(2)}  (${s.ran_out_of_turns} ran out of turns)`,
    `  judge failures      ${s.judge_failures} of ${s.judge_groups} groups`,
    `  rollout errors      ${s.rollout_errors}`,
  ].join('\n');
}
