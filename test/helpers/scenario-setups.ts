/**
 * Offline scenario generation against a real server, and the oracle / do-nothing property of what it made, shared by
 * the scenario tests on the published servers. The agents are scripted policies behind an OpenAI-compatible HTTP
 * double (it stands in for a remote model, which cannot run here); every rollout runs on an isolated server in its
 * own sandbox. Call closeDoubles() in afterAll.
 */
import { expect } from 'vitest';
import { OpenAIPolicy } from '../../src/agent/policy.js';
import { rolloutGroups } from '../../src/agent/rollout-groups.js';
import { connect, targetUsesSandbox, type SafetyPolicy } from '../../src/mcp/index.js';
import type { Target } from '../../src/mcp/types.js';
import { scoreChecks } from '../../src/ruler/checks.js';
import { generateOfflineScenarios, type OfflineOptions, type OfflineResult } from '../../src/scenarios/offline/index.js';
import { checkedCalls, type Scenario } from '../../src/scenarios/scenario.js';
import type { OpenAIDouble } from '../doubles/openai-double.js';
import { goodStrategy, scriptedStrategy, startPolicyDouble } from '../doubles/policy-double.js';

export interface Setup {
  target: Target;
  sandboxFrom?: string;
  safety: SafetyPolicy;
  /**
   * The target keeps its state in memory only (the fixture, server-everything), so a fresh process per rollout is
   * isolation. Default: true when the target names no `{sandbox}` (every such server these tests use is in-memory).
   */
  stateInMemory?: boolean;
}

const inMemory = (s: Setup) => s.stateInMemory ?? !targetUsesSandbox(s.target);

const doubles: OpenAIDouble[] = [];
export async function closeDoubles(): Promise<void> {
  await Promise.all(doubles.splice(0).map((d) => d.close()));
}

/** Offline scenarios for the setup, with an isolated server for replays. */
export async function generateFor(s: Setup, count: number, seed: number, extra: Partial<OfflineOptions> = {}): Promise<OfflineResult> {
  const opts = { sandboxFrom: s.sandboxFrom, policy: s.safety, stateInMemory: inMemory(s) };
  const session = await connect(s.target, opts);
  try {
    return await generateOfflineScenarios(session, { count, seed, ...extra, isolatedServer: () => connect(s.target, { ...opts, isolated: true }) });
  } finally {
    await session.close();
  }
}

/** The scripted oracle (the checked calls) passes every check of every scenario; a do-nothing agent passes none. */
export async function expectOracleAllIdleNone(s: Setup, scenarios: Scenario[]): Promise<void> {
  const run = async (strategy: Parameters<typeof startPolicyDouble>[0]) => {
    const double = await startPolicyDouble(strategy);
    doubles.push(double);
    const policy = new OpenAIPolicy({ baseURL: double.baseURL, model: 'scripted', maxRetries: 0 });
    return rolloutGroups({ policy, target: s.target, scenarios, rolloutsPerGroup: 1, concurrency: 2, isolate: true, sandboxFrom: s.sandboxFrom, stateInMemory: inMemory(s), policyForSafety: s.safety });
  };
  const good = await run(goodStrategy(scenarios));
  const idle = await run(scriptedStrategy([], ''));
  scenarios.forEach((sc, i) => {
    expect(scoreChecks(good[i][0], sc).fraction, `${sc.task}\n${JSON.stringify(sc.checks)}\n${JSON.stringify(good[i][0].state)}`).toBe(1);
    expect(scoreChecks(idle[i][0], sc).fraction, sc.task).toBe(0);
  });
}

/** The first tool a scenario's checks require. */
export const calledTool = (s: Scenario): string | undefined => {
  return checkedCalls(s.checks ?? [])[0]?.tool;
};
