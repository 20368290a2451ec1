/** The figures of a training step's metrics row that take more than a field: rewards, servers, constraints, caches. */
import type { McpTrajectory } from '../agent/trajectory.js';
import type { TrainResult } from '../backend/schemas.js';
import type { ChatEngine } from '../chat/chat-engine.js';
import type { KvCacheStats } from '../engine/model.js';
import type { RolloutPool } from '../train/rollout-pool.js';
import { hasSampledIds } from '../train/tokenize.js';

/** The step's rollouts, each with the advantage it was trained with (null: not trained on). */
export function withAdvantages(rollouts: McpTrajectory[], trainGroups: McpTrajectory[][], advantages: TrainResult['advantages']) {
  const of = new Map<McpTrajectory, number>();
  trainGroups.forEach((g, k) => advantages[k]?.forEach((a, i) => of.set(g[i], a)));
  return rollouts.map((t) => ({ ...t, advantage: of.get(t) ?? null }));
}

/**
 * A step's figures from the rollout servers: the pool's counters, the turns served and those without ids
 * (re-tokenised) or with the sampler's own logprobs, over every rollout; the turns whose ids the trainer's
 * tokenisation would not give, over the rollouts trained (measured while tokenising them); the off-policy mismatch.
 */
export function rolloutServerMetrics(pool: RolloutPool, rollouts: McpTrajectory[], tokenIdsDiffer: number, off: TrainResult['offPolicy']): Record<string, number> {
  const turns = rollouts.flatMap((t) => t.messages.filter((m) => m.role === 'assistant'));
  return {
    ...pool.takeStats(), rollout_turns: turns.length, retokenized_turns: turns.filter((m) => !hasSampledIds(m)).length,
    token_ids_differ: tokenIdsDiffer, sampler_logprob_turns: turns.filter((m) => m.mcprl?.temperature !== undefined).length,
    ...(off ? { logprob_mismatch: off.logprobMismatch, logprob_mismatch_max: off.logprobMismatchMax, tis_truncated: off.tisTruncated, tis_weight_deviation: off.tisWeightDeviation, tokens_without_sampler_logprob: off.tokensWithoutSamplerLogprob } : {}),
  };
}

/**
 * How constrained decoding met the tools: tools whose schema it could not express (their arguments were only
 * held to be a JSON object) and samples that met a state allowing no token (decoded on unconstrained). Logged
 * in full once.
 */
export function constrainMetrics(engine: ChatEngine, groups: McpTrajectory[][], log: ((line: string) => void) | null): Record<string, number> {
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

/**
 * A step's staleness figures: over its rollouts with a recorded policy step, how many adapters older than `trained`
 * their oldest turn's was (mean, max); the groups discarded as too stale.
 */
export function stalenessMetrics(rollouts: McpTrajectory[], trained: number, tooStale: number | undefined): Record<string, number> {
  const st = rollouts.filter((t) => t.policy_step !== undefined).map((t) => trained - t.policy_step!);
  return { staleness_mean: st.length ? st.reduce((a, b) => a + b, 0) / st.length : 0, staleness_max: st.length ? Math.max(...st) : 0, groups_too_stale: tooStale ?? 0 };
}

/** The mean over groups of their rewards' standard deviation (groups of one attempt aside). */
export function rewardStd(groups: McpTrajectory[][]): number {
  const stds = groups.filter((g) => g.length > 1).map((g) => {
    const mean = g.reduce((a, t) => a + t.reward, 0) / g.length;
    return Math.sqrt(g.reduce((a, t) => a + (t.reward - mean) ** 2, 0) / g.length);
  });
  return stds.length ? stds.reduce((a, b) => a + b, 0) / stds.length : 0;
}

/** The in-process engine's KV cache figures of a metrics row. */
export function kvCacheMetrics(s: KvCacheStats): Record<string, number> {
  return { kv_cache_budget_bytes: s.budgetBytes, kv_cache_peak_bytes: s.peakBytes, kv_cache_peak_sequences: s.peakSlots };
}
