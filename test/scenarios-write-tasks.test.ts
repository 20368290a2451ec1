/**
 * Tasks for tools that write, checked by state, on the real server-memory (stdio, from node_modules) with a seeded
 * memory file copied into per-server sandboxes. The agents are scripted policies behind an OpenAI-compatible HTTP
 * double (standing in for a remote model, which cannot run here): an oracle that makes the checked calls, and one
 * that does nothing.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OpenAIPolicy } from '../src/agent/policy.js';
import { rolloutGroups } from '../src/agent/rollout-groups.js';
import { connect, type McpSession, type ToolInfo } from '../src/mcp/index.js';
import { scoreChecks } from '../src/ruler/checks.js';
import { toolNaming } from '../src/scenarios/naming.js';
import { generateOfflineScenarios } from '../src/scenarios/offline/index.js';
import { stringLeaves } from '../src/scenarios/offline/values.js';
import type { Scenario } from '../src/scenarios/scenario.js';
import type { OpenAIDouble } from './doubles/openai-double.js';
import { goodStrategy, scriptedStrategy, startPolicyDouble } from './doubles/policy-double.js';
import { memoryTarget, SEEDED_MEMORY, folderWithSeededMemory } from './helpers/servers.js';

const target = memoryTarget('{sandbox}/memory.jsonl');
const doubles: OpenAIDouble[] = [];
let seed: string;
let session: McpSession;
let writes: Scenario[];
let tools: ToolInfo[];

beforeAll(async () => {
  seed = folderWithSeededMemory();
  session = await connect(target, { sandboxFrom: seed });
  const r = await generateOfflineScenarios(session, {
    count: 8, seed: 5, maxAttempts: 40, isolatedServer: () => connect(target, { sandboxFrom: seed, isolated: true }),
  });
  writes = r.scenarios.filter((s) => s.checks?.some((c) => c.kind === 'state_contains'));
  tools = await session.listTools();
}, 240_000);

afterAll(async () => {
  await session?.close();
  await Promise.all(doubles.map((d) => d.close()));
});

async function policyFor(strategy: Parameters<typeof startPolicyDouble>[0]): Promise<OpenAIPolicy> {
  const double = await startPolicyDouble(strategy);
  doubles.push(double);
  return new OpenAIPolicy({ baseURL: double.baseURL, model: 'scripted', maxRetries: 0 });
}

describe('write tasks on server-memory', () => {
  it('asks for create_entities / add_observations changes in plain words, checked by a read-only tool afterwards', () => {
    expect(writes.length).toBeGreaterThan(0);
    for (const s of writes) {
      const [call, state] = s.checks!;
      expect(call).toMatchObject({ kind: 'tool_called' });
      expect(['create_entities', 'add_observations', 'create_relations']).toContain(call.kind === 'tool_called' && call.tool);
      expect(state).toMatchObject({ kind: 'state_contains' });
      expect(['open_nodes', 'search_nodes', 'read_graph']).toContain(state.kind === 'state_contains' && state.tool);
      // The task states every value written, in words: no JSON, no tool name, no argument key.
      expect(s.task).not.toMatch(/[{}[\]]|entityName|entityType/);
      expect(toolNaming(s.task, tools), s.task).toBeUndefined();
      // (A find → act task names its entity by a clue instead: 'the person noted as "…"'.)
      if (call.kind === 'tool_called' && !/ noted as "/.test(s.task)) for (const v of stringLeaves(call.args)) expect(s.task, v).toContain(v);
    }
    // Generation wrote only into sandboxes.
    expect(readFileSync(path.join(seed, 'memory.jsonl'), 'utf8')).toBe(SEEDED_MEMORY);
  });

  it('a scripted oracle passes every check under --isolate; a do-nothing agent passes no state check', async () => {
    const run = async (policy: OpenAIPolicy) =>
      rolloutGroups({ policy, target, scenarios: writes, rolloutsPerGroup: 1, concurrency: 2, isolate: true, sandboxFrom: seed });
    const oracle = await run(await policyFor(goodStrategy(writes)));
    const idle = await run(await policyFor(scriptedStrategy([], 'I did nothing.')));
    writes.forEach((s, i) => {
      const good = scoreChecks(oracle[i][0], s);
      expect(good.passed, JSON.stringify(oracle[i][0].state)).toBe(good.total);
      const none = scoreChecks(idle[i][0], s);
      const stateIndex = s.checks!.findIndex((c) => c.kind === 'state_contains');
      expect(none.results[stateIndex]).toBe(false);
      expect(none.passed).toBe(0);
    });
    expect(readFileSync(path.join(seed, 'memory.jsonl'), 'utf8')).toBe(SEEDED_MEMORY);
  });
});
