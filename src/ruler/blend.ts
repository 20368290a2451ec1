import { z } from 'zod';
import type { McpTrajectory } from '../agent/trajectory.js';
import type { ChecksScore } from './checks.js';
import { JudgeError } from './judge.js';
import type { RulerResult } from './ruler.js';

/** How attempts are scored: the RULER judge, the scenario's verifiable checks, or a blend of both (see blendRewards). */
export const RewardModeSchema = z.enum(['ruler', 'checks', 'blend']);
export type RewardMode = z.infer<typeof RewardModeSchema>;

/**
 * The reward mode of a job: the one asked for, else `blend` when a judge is given and `checks` without. A mode
 * that needs the judge (ruler, blend) without one is refused (JudgeError JUDGE_MISSING); `howToAddJudge` ends the
 * message in the caller's words. Every command and tool that takes a reward mode decides it here.
 */
export function resolveRewardMode(requested: RewardMode | undefined, hasJudge: boolean, howToAddJudge = 'give a judge model and its endpoint'): RewardMode {
  const mode = requested ?? (hasJudge ? 'blend' : 'checks');
  if (mode !== 'checks' && !hasJudge) throw new JudgeError('JUDGE_MISSING', `reward ${mode} needs a judge: ${howToAddJudge}`);
  return mode;
}

export interface BlendOptions {
  mode: RewardMode;
  /** The judge's result for this group; undefined when no judge was asked. */
  ruler?: RulerResult;
  /** One entry per trajectory of the group; undefined when the scenario has no checks. */
  checks?: ChecksScore[];
  /** Weight of the RULER score in `blend` mode, 0..1; the checks get the rest. Default 0.5. */
  rulerWeight?: number;
}

export interface BlendOutcome {
  /** False when no reward could be computed; the trajectories then carry `unscored`. */
  scored: boolean;
  reason?: string;
}

/**
 * Sets `reward`, `reward_components` and the checks metrics of every trajectory of one group.
 * - `ruler`: the judge's score. `checks`: the checks' credit (ChecksScore.credit: each check passed counts 1, a
 *   failed answer check the part of its value the answer states).
 * - `blend`: rulerWeight·ruler + (1−rulerWeight)·checks when both exist; the one that exists otherwise.
 * Every component that was computed is kept in reward_components, whatever the mode. When the mode's
 * components are missing (judge failed, scenario without checks), the group is marked unscored rather than
 * silently given zeros.
 */
export function blendRewards(group: McpTrajectory[], opts: BlendOptions): BlendOutcome {
  const w = opts.rulerWeight ?? 0.5;
  if (!(w >= 0 && w <= 1)) throw new RangeError(`rulerWeight must be in [0, 1], got ${w}`);
  if (opts.checks && opts.checks.length !== group.length) {
    throw new RangeError(`checks has ${opts.checks.length} entries for a group of ${group.length}`);
  }
  const rulerOk = opts.ruler !== undefined && !('skipped' in opts.ruler);
  const rulerScores = rulerOk ? (opts.ruler as { scores: number[] }).scores : undefined;
  const hasChecks = opts.checks !== undefined && opts.checks.some((c) => c.total > 0);

  let reason: string | undefined;
  if (opts.mode === 'ruler' && !rulerOk) reason = rulerMissing(opts.ruler);
  if (opts.mode === 'checks' && !hasChecks) reason = 'the scenario has no checks';
  if (opts.mode === 'blend' && !rulerOk && !hasChecks) reason = `${rulerMissing(opts.ruler)} and the scenario has no checks`;

  group.forEach((t, i) => {
    const components: McpTrajectory['reward_components'] = {};
    if (rulerScores) components.ruler = rulerScores[i];
    if (hasChecks) {
      const c = opts.checks![i];
      components.checks = c.credit;
      t.metrics.checks_passed = c.passed;
      t.metrics.checks_total = c.total;
    }
    t.reward_components = components;
    delete t.unscored;
    if (reason !== undefined) {
      t.reward = 0;
      t.unscored = reason;
      return;
    }
    if (opts.mode === 'ruler') t.reward = components.ruler!;
    else if (opts.mode === 'checks') t.reward = components.checks!;
    else if (components.ruler !== undefined && components.checks !== undefined) {
      t.reward = w * components.ruler + (1 - w) * components.checks;
    } else {
      t.reward = components.ruler ?? components.checks!;
      t.logs.push(`blend: only the ${components.ruler !== undefined ? 'ruler' : 'checks'} component exists; reward is that alone`);
    }
  });
  return reason === undefined ? { scored: true } : { scored: false, reason };
}

function rulerMissing(r: RulerResult | undefined): string {
  if (r === undefined) return 'no judge was asked';
  return 'skipped' in r ? `judge failed: ${r.reason}` : 'judge failed';
}
