/**
 * One checkpoint, one figure: a rollout through `mcprl serve` (OpenAIPolicy over HTTP) must be the rollout the
 * in-process engine policy makes — the same turns, tool calls, tool answers and score. Training validates
 * in-process; users deploy the adapter behind the served path.
 *
 * The first case uses a scripted model (test/helpers/scripted-model.ts) that always writes an unreadable
 * `<tool_call>` block: the in-process policy gets the parse error back and tries again, and so must the served
 * path. The second runs the bundled tiny model greedily on validation scenarios of the bookshop fixture, both
 * ways, and compares every trajectory.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen3TokenizerDir } from '../scripts/random-model.js';
import { runEval } from '../src/eval/evaluate.js';
import { OpenAIPolicy, type ChatMessage, type Policy } from '../src/agent/policy.js';
import type { McpTrajectory } from '../src/agent/trajectory.js';
import { ChatEngine } from '../src/chat/chat-engine.js';
import { EnginePolicy } from '../src/agent/engine-policy.js';
import type { Model } from '../src/engine/model.js';
import { startServer, type RunningServer } from '../src/serve/server.js';
import { HfTokenizer } from '../src/chat/tokenizer.js';
import { loadScenarioSet, type Scenario } from '../src/scenarios/index.js';
import { makeScriptedModel } from './helpers/scripted-model.js';
import { fixtureStdioTarget, REPO_ROOT } from './helpers/servers.js';

const TINY_MODEL = process.env.MCPRL_TEST_TINY_MODEL ?? join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const TINY_SCENARIOS = join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop');

/** What a rollout did, without what legitimately differs per request (tool call ids, timings). */
function visible(t: McpTrajectory) {
  return {
    scenario: t.scenario_id,
    reward: t.reward,
    completed: t.metrics.completed,
    turns: t.metrics.turns,
    invalid_calls: t.metrics.invalid_calls,
    final_answer: t.final_answer,
    messages: t.messages.map((m: ChatMessage) => ({
      role: m.role,
      content: m.content,
      calls: m.tool_calls?.map((c) => c.function),
      token_ids: m.mcprl?.token_ids,
    })),
  };
}

async function bothWays(engine: ChatEngine, model: string, scenarios: Scenario[], maxTurns: number) {
  const common = { target: fixtureStdioTarget(), scenarios, reward: 'checks' as const, rolloutsPerGroup: 1, concurrency: 4, maxTurns, seed: 1 };
  const inProcess = await runEval({ ...common, policy: new EnginePolicy(engine, { model, temperature: 0, maxTokens: 48 }) });
  let server: RunningServer | undefined;
  try {
    server = await startServer(engine, { port: 0 });
    const served: Policy = new OpenAIPolicy({ baseURL: server.url, model, temperature: 0, maxTokens: 48, maxRetries: 0 });
    const overHttp = await runEval({ ...common, policy: served });
    return { inProcess, overHttp };
  } finally {
    await server?.close();
  }
}

describe('served and in-process rollouts agree', () => {
  let dir: string;
  let engine: ChatEngine;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mcprl-parity-'));
    const tok = await HfTokenizer.load(qwen3TokenizerDir());
    // An unreadable call: the JSON inside the tags is cut short.
    const reply = tok.encode('<tool_call>{"name": broken</tool_call><|im_end|>');
    await makeScriptedModel(join(dir, 'scripted'), [tok.encode('\n')[0], ...reply]);
    engine = await ChatEngine.load(join(dir, 'scripted'));
  }, 300_000);

  afterAll(async () => {
    (engine?.model as Model | undefined)?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('an unreadable tool call is reported back and the agent tries again, both ways', async () => {
    const scenario: Scenario = { id: 'stock', task: 'Is bk-007 in stock?', difficulty: 1, source: 'schema', checks: [{ kind: 'tool_called', tool: 'check_stock', args: { book_id: 'bk-007' } }] };
    const { inProcess, overHttp } = await bothWays(engine, engine.modelName, [scenario], 3);
    const [a] = inProcess.groups[0];
    const [b] = overHttp.groups[0];
    // Every turn is the same unreadable call, each answered by an error message: three turns, not one.
    expect(a.metrics.turns).toBe(3);
    expect(a.metrics.invalid_calls).toBe(3);
    expect(a.messages.filter((m) => m.role === 'user' && m.content?.startsWith('Error: a tool call could not be parsed'))).toHaveLength(3);
    expect(visible(b)).toEqual(visible(a));
  }, 300_000);
});

describe('the tiny model scores the same through mcprl serve as in-process', () => {
  it('greedy validation rollouts: identical trajectories and success', async () => {
    const engine = await ChatEngine.load(TINY_MODEL);
    try {
      const { val } = await loadScenarioSet(TINY_SCENARIOS);
      const { inProcess, overHttp } = await bothWays(engine, engine.modelName, val.slice(0, 8), 3);
      expect(overHttp.groups.flat().map(visible)).toEqual(inProcess.groups.flat().map(visible));
      expect(overHttp.summary.success_rate).toBe(inProcess.summary.success_rate);
    } finally {
      (engine.model as Model).close();
    }
  }, 300_000);
});
