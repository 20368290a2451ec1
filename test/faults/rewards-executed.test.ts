/**
 * §5 of issue 42: rewards count only what happened. A `tool_called` check passed for calls the server never ran
 * (the session answered "Unknown tool" after the server changed its tool list; the safety policy refused the call)
 * and for calls whose outcome is unknown (the connection was lost during the call). Now each tool answer in a
 * trajectory records whether the server executed the call (`execution`), only executed calls count for checks,
 * and unknown outcomes are failures, counted in the eval summary.
 *
 * The servers are real processes (test/helpers: the library server, which can drop its tools after a call; the
 * misbehaving server, whose `crash` exits mid-call and whose `wipe` the default safety policy refuses); the agent is
 * a scripted policy behind an OpenAI-compatible HTTP double (a remote model cannot run here). Every rollout runs
 * one call after another, so nothing depends on timing.
 */
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { OpenAIPolicy } from '../../src/agent/policy.js';
import type { McpTrajectory } from '../../src/agent/trajectory.js';
import { runEval } from '../../src/eval/evaluate.js';
import type { Target } from '../../src/mcp/types.js';
import type { Scenario } from '../../src/scenarios/scenario.js';
import type { OpenAIDouble } from '../doubles/openai-double.js';
import { scriptedStrategy, startPolicyDouble, type ScriptedTurn } from '../doubles/policy-double.js';
import { misbehavingStdioTarget, REPO_ROOT, tsStdioTarget } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const LIBRARY = path.join(REPO_ROOT, 'test', 'helpers', 'library-server.ts');
const doubles: OpenAIDouble[] = [];
afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
});

/** Three attempts at `scenario` on `target`, each playing `turns` then complete_task, scored by its checks. */
async function evalScripted(target: Target, scenario: Scenario, turns: ScriptedTurn[], isolate = false) {
  const double = await startPolicyDouble(scriptedStrategy(turns, 'done'));
  doubles.push(double);
  const policy = new OpenAIPolicy({ baseURL: double.baseURL, model: 'scripted', maxRetries: 0 });
  return runEval({ policy, target, scenarios: [scenario], rolloutsPerGroup: 3, concurrency: 1, isolate, reward: 'checks' });
}

/** The `execution` recorded on the answer to each call of `tool`. */
const executionOf = (t: McpTrajectory, tool: string) => t.messages.filter((m) => m.role === 'tool' && m.name === tool).map((m) => m.execution);

const calledCheck = (tool: string, args: Record<string, unknown> = {}): Scenario => ({
  id: `calls-${tool}`, task: `Use ${tool}.`, difficulty: 1, source: 'schema', checks: [{ kind: 'tool_called', tool, args }],
});

describe('a tool_called check counts only calls the server executed', () => {
  it('a target that drops its tools mid-run: the call answered "Unknown tool" fails the check', async () => {
    // Each rollout has a fresh library server that takes get_book off its list after the first call (list_branches).
    const target = tsStdioTarget(LIBRARY, ['--drop-tools-after', '1']);
    const { groups, summary } = await evalScripted(target, calledCheck('get_book', { book_id: 'lb-001' }), [
      { toolCalls: [{ name: 'list_branches', arguments: {} }] },
      { toolCalls: [{ name: 'get_book', arguments: { book_id: 'lb-001' } }] },
    ], true);
    expect(summary.successes).toBe(0);
    for (const t of groups[0]) {
      expect(t.messages.find((m) => m.role === 'tool' && m.name === 'get_book')?.content).toMatch(/Unknown tool 'get_book'/);
      expect(executionOf(t, 'list_branches')).toEqual(['executed']);
      expect(executionOf(t, 'get_book')).toEqual(['not_executed']);
      expect(t.metrics.checks_passed).toBe(0);
    }
    fault('the target changes its tool list mid-run; the checked call is answered "Unknown tool"', '0/3 success (the call never ran)', `${summary.successes}/3 success`);
  });

  it('a target that drops its tools without notice: the server\'s own "Tool … disabled" answer fails the check', async () => {
    // No tools.listChanged: the session still lists get_book and sends the call; the server answers with an error.
    const target = tsStdioTarget(LIBRARY, ['--drop-tools-after', '1', '--unannounced']);
    const { groups, summary } = await evalScripted(target, calledCheck('get_book', { book_id: 'lb-001' }), [
      { toolCalls: [{ name: 'list_branches', arguments: {} }] },
      { toolCalls: [{ name: 'get_book', arguments: { book_id: 'lb-001' } }] },
    ], true);
    expect(summary.successes).toBe(0);
    for (const t of groups[0]) {
      expect(t.messages.find((m) => m.role === 'tool' && m.name === 'get_book')?.content).toMatch(/Tool get_book disabled/);
      expect(executionOf(t, 'get_book')).toEqual(['not_executed']);
      expect(t.metrics.checks_passed).toBe(0);
    }
    fault('the target drops the checked tool without notice; the server answers "Tool get_book disabled"', '0/3 success', `${summary.successes}/3 success`);
  });

  it('a call the safety policy refused fails the check', async () => {
    const { groups, summary } = await evalScripted(misbehavingStdioTarget(), calledCheck('wipe'), [{ toolCalls: [{ name: 'wipe', arguments: {} }] }]);
    expect(summary.successes).toBe(0);
    for (const t of groups[0]) {
      expect(executionOf(t, 'wipe')).toEqual(['not_executed']);
      expect(t.metrics.checks_passed).toBe(0);
    }
    fault('the checked call is refused by the safety policy (never sent)', '0/3 success', `${summary.successes}/3 success`);
  });

  it('a call whose outcome is unknown (the connection was lost during it) is a failure, counted in the summary', async () => {
    const { groups, summary } = await evalScripted(misbehavingStdioTarget(), calledCheck('crash'), [{ toolCalls: [{ name: 'crash', arguments: {} }] }]);
    expect(summary.successes).toBe(0);
    expect(summary.unknown_outcomes).toBe(3);
    for (const t of groups[0]) {
      expect(t.messages.find((m) => m.role === 'tool' && m.name === 'crash')?.content).toMatch(/not known whether the tool ran/);
      expect(executionOf(t, 'crash')).toEqual(['unknown']);
      expect(t.metrics.unknown_outcomes).toBe(1);
      expect(t.metrics.checks_passed).toBe(0);
    }
    fault('the connection is lost during the checked call (outcome unknown)', '0/3 success; 3 unknown outcomes in the summary', `${summary.successes}/3 success; unknown_outcomes ${summary.unknown_outcomes}`);
  });
});
