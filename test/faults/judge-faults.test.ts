/**
 * §3 of issue 12, the judge under bad conditions: Retry-After on 429/503 is honoured (never retried sooner, and not
 * at all when the wait would overrun the retry budget), a hanging judge is cut off by its timeout, and `mcprl eval`
 * takes --judge-timeout and --judge-retry-budget. The judge is a local HTTP double (a remote LLM API cannot run
 * here); `mcprl eval` runs for real against the real fixture server.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { McpTrajectory } from '../../src/agent/trajectory.js';
import { OpenAIJudge } from '../../src/ruler/judge.js';
import { rulerScores } from '../../src/ruler/ruler.js';
import { loadScenarioSet, writeScenarioSet } from '../../src/scenarios/scenario.js';
import { chatReply, hangReply, startOpenAIDouble, type OpenAIDouble, type Reply } from '../doubles/openai-double.js';
import { goodStrategy, startPolicyDouble } from '../doubles/policy-double.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from '../helpers/servers.js';
import { mcprl } from './cli.js';
import { fault } from './fault-table.js';

const doubles: OpenAIDouble[] = [];
let work: string;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-judge-'));
});
afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
  if (work) await rm(work, { recursive: true, force: true });
});

const traj = (id: string, answer: string): McpTrajectory => ({
  id, scenario_id: 's1', group_id: 's1', tools: [], final_answer: answer, reward: 0, reward_components: {}, logs: [],
  messages: [{ role: 'user', content: 'What does bk-003 cost?' }, { role: 'assistant', content: answer }],
  metrics: { turns: 1, tool_calls: 0, tool_errors: 0, invalid_calls: 0, completed: true, ran_out_of_turns: false, latency_ms: 1 },
});
const group = [traj('a', 'It costs 12 EUR.'), traj('b', 'No idea.')];
const scores: Reply = chatReply(JSON.stringify({ scores: [{ trajectory_id: '1', explanation: 'right', score: 0.9 }, { trajectory_id: '2', explanation: 'wrong', score: 0.1 }] }));
const limited = (status: number, seconds: string): Reply => ({ kind: 'json', status, json: { error: { message: 'slow down', type: 'rate_limit', param: null, code: null } }, headers: { 'retry-after': seconds } });

async function judgeDouble(replies: Reply[], fallback?: Reply): Promise<OpenAIDouble> {
  const d = await startOpenAIDouble(replies, fallback ? { fallback } : {});
  doubles.push(d);
  return d;
}
const posts = (d: OpenAIDouble) => d.requests.filter((r) => r.method === 'POST').length;

describe('judge faults', () => {
  it('a 429 whose Retry-After lies beyond the retry budget is not retried early: the group is skipped, saying why', async () => {
    const d = await judgeDouble([limited(429, '3600'), scores]);
    const r = await rulerScores(group, { judge: new OpenAIJudge({ baseURL: d.baseURL, model: 'j' }), backoffMs: 1, retryBudgetMs: 60_000 });
    expect(r).toMatchObject({ skipped: true, attempts: 1 });
    expect('reason' in r && r.reason).toMatch(/a retry after 3600 s, as Retry-After asked, would exceed the retry budget of 60 s/);
    expect(posts(d)).toBe(1);
    fault('judge 429 with Retry-After: 3600', 'no early retry; skipped within budget', `${posts(d)} request, group skipped`);
  });

  it('a 503 with Retry-After: 0 is retried and then scored', async () => {
    const d = await judgeDouble([limited(503, '0'), scores]);
    const r = await rulerScores(group, { judge: new OpenAIJudge({ baseURL: d.baseURL, model: 'j' }), backoffMs: 60_000 });
    // backoffMs alone would have waited a minute (past the test's limit): the endpoint's Retry-After decided.
    expect(r).toMatchObject({ scores: [0.9, 0.1], attempts: 2 });
    fault('judge 503 with Retry-After: 0', 'retried as told, then scored', 'scored on attempt 2');
  });

  it('`mcprl eval --judge-timeout --judge-retry-budget`: a hanging judge costs one timeout per group, not minutes', async () => {
    const hanging = await judgeDouble([], hangReply());
    const set = await loadScenarioSet(path.join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'));
    const scenarios = set.train.slice(0, 2);
    await writeScenarioSet(path.join(work, 'scen'), scenarios, []);
    const policy = await startPolicyDouble(goodStrategy(scenarios));
    doubles.push(policy);
    const out = path.join(work, 'out');
    const r = await mcprl(['eval', '--scenarios', path.join(work, 'scen'), '--split', 'train', '--model-base-url', policy.baseURL, '--model', 'p',
      '--judge-base-url', hanging.baseURL, '--judge-model', 'j', '--rollouts', '2', '--reward', 'blend', '--judge-timeout', '500', '--judge-retry-budget', '100', '--out', out,
      '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN], { env: { ...process.env, OPENAI_API_KEY: 'k' } });
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(await readFile(path.join(out, 'summary.json'), 'utf8'));
    expect(summary).toMatchObject({ judge_groups: 2, judge_failures: 2 });
    // One request per group: the first timed out, and no retry fitted in the budget.
    expect(posts(hanging)).toBe(2);
    const t = JSON.parse((await readFile(path.join(out, 'trajectories.jsonl'), 'utf8')).split('\n')[0]);
    expect(t.logs.join('\n')).toMatch(/ruler: group skipped: judge failed after 1 attempt\(s\): JUDGE_UNREACHABLE: .*timed out/i);
    fault('judge hangs', '--judge-timeout per request, --judge-retry-budget per group', `${posts(hanging)} requests for 2 groups; both skipped`);
  });
});

describe('scenario generator faults', () => {
  it('`mcprl scenarios --generator-timeout`: a hanging generator fails with a timeout, not after minutes', async () => {
    const hanging = await judgeDouble([], hangReply());
    const r = await mcprl(['scenarios', '--out', path.join(work, 'gen'), '--generator-base-url', hanging.baseURL, '--generator-model', 'g', '--generator-timeout', '300',
      '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN], { env: { ...process.env, OPENAI_API_KEY: 'k' } });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/scenario generation failed: .*tim(ed|e) ?out/i);
    // The first request and the SDK's two retries: each cut off by the timeout.
    expect(posts(hanging)).toBe(3);
    fault('scenario generator hangs', '--generator-timeout per request, bounded retries', `${posts(hanging)} requests, then an error`);
  });
});
