/**
 * RULER as a reward helper for any rollout: an LLM judge ranks the attempts of one group against each other
 * (src/ruler/ruler.ts, ART's prompt and rubric) and its scores become the group's rewards.
 */
import { rulerScores, type RulerOptions } from '../ruler/ruler.js';
import { parseInput } from './errors.js';
import { TrajectoryGroupSchema, type TrajectoryGroup, type TrajectoryGroupInput } from './schemas.js';

/**
 * The group with each trajectory's reward set to the judge's score (0 to 1), kept also as `metrics.ruler`,
 * and the judge's explanation as `metadata.ruler_explanation`. Resolves with null when the judge failed on
 * every attempt (as ART's ruler_score_group gives None), leaving the caller to skip or retry the group.
 */
export async function rulerScoreGroup(group: TrajectoryGroupInput, opts: RulerOptions): Promise<TrajectoryGroup | null> {
  const g = parseInput(TrajectoryGroupSchema, group, 'group');
  const r = await rulerScores(g.trajectories, opts);
  if ('skipped' in r) return null;
  return {
    ...g,
    trajectories: g.trajectories.map((t, i) => ({
      ...t,
      reward: r.scores[i],
      metrics: { ...t.metrics, ruler: r.scores[i] },
      metadata: { ...t.metadata, ruler_explanation: r.explanations[i] },
    })),
  };
}
