/**
 * RULER against a judge double: test/doubles/openai-double.ts stands in for the remote judge LLM (which cannot
 * run here); the prompt building, parsing, retries, dedup and caching are the real code.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../src/agent/policy.js';
import type { McpTrajectory } from '../src/agent/trajectory.js';
import { JudgeError } from '../src/ruler/judge.js';
import { DEFAULT_RUBRIC, buildRulerPrompt, commonPrefixLength } from '../src/ruler/prompt.js';
import { parseJudgeAnswer, rulerScores } from '../src/ruler/ruler.js';
import { chatReply, httpError, startOpenAIDouble, type OpenAIDouble, type RecordedRequest, type ScriptedReply } from './doubles/openai-double.js';
import { fault } from './faults/fault-table.js';

const TASK = 'Find the price of "The Silent Garden" in euros.';
const SYSTEM = 'You are an agent. Call complete_task(summary) when done.';
const TOOLS: McpTrajectory['tools'] = [
  { type: 'function', function: { name: 'search_books', description: 'Search the catalogue.', parameters: { type: 'object', properties: { query: { type: 'string' } } } } },
];

function traj(id: string, remainder: ChatMessage[]): McpTrajectory {
  return {
    id,
    scenario_id: 's1',
    group_id: 's1',
    messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: TASK }, ...remainder],
    tools: TOOLS,
    final_answer: null,
    reward: 0,
    reward_components: {},
    metrics: { turns: 1, tool_calls: 0, tool_errors: 0, invalid_calls: 0, completed: true, ran_out_of_turns: false, latency_ms: 1 },
    logs: [],
  };
}

const call = (summary: string): ChatMessage => ({
  role: 'assistant',
  content: null,
  tool_calls: [{ id: 'c1', type: 'function', function: { name: 'complete_task', arguments: JSON.stringify({ summary }) } }],
  mcprl: { token_ids: [424242, 434343], logprobs: [-0.5, -0.25] },
});
const good = traj('a', [call('It costs 12.87 EUR (marker-GOOD)')]);
const bad = traj('b', [call('No idea (marker-BAD)')]);
const middling = traj('c', [{ role: 'assistant', content: 'Maybe 10 EUR? (marker-MID)' }]);

/** A judge answer scoring ids with the given scores. */
const answer = (scores: Record<string, number>) =>
  chatReply(JSON.stringify({ scores: Object.entries(scores).map(([trajectory_id, score]) => ({ trajectory_id, explanation: `why ${trajectory_id}`, score })) }));

const doubles: OpenAIDouble[] = [];
async function judgeDouble(...replies: ScriptedReply[]): Promise<OpenAIDouble> {
  const d = await startOpenAIDouble(replies);
  doubles.push(d);
  return d;
}
const judgeOpts = (d: OpenAIDouble) => ({ judge: { baseURL: d.baseURL, model: 'judge-double' }, backoffMs: 1 });
const posts = (d: OpenAIDouble): RecordedRequest[] => d.requests.filter((r) => r.method === 'POST');
const countOf = (text: string, needle: string) => text.split(needle).length - 1;

afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
});

describe('RULER prompt', () => {
  it('holds the common context once, the tools, and every trajectory remainder under its id', () => {
    const p = buildRulerPrompt([good, bad, middling]);
    expect(p.ids).toEqual(['1', '2', '3']);
    const [system, user] = p.messages;
    expect(system.content).toContain(DEFAULT_RUBRIC);
    expect(system.content).toMatch(/same goal/);
    expect(countOf(user.content, TASK.replace(/"/g, '\\"'))).toBe(1);
    expect(countOf(user.content, SYSTEM)).toBe(1);
    const context = user.content.slice(user.content.indexOf('<context>'), user.content.indexOf('</context>'));
    expect(context).toContain(SYSTEM);
    expect(countOf(user.content, '"search_books"')).toBe(1);
    for (const [i, marker] of ['marker-GOOD', 'marker-BAD', 'marker-MID'].entries()) {
      const start = user.content.indexOf(`<trajectory id="${i + 1}">`);
      const end = user.content.indexOf('</trajectory>', start);
      expect(start).toBeGreaterThan(user.content.indexOf('</context>'));
      expect(user.content.slice(start, end)).toContain(marker);
      expect(countOf(user.content, marker)).toBe(1);
    }
    // Token ids are for training, not for the judge.
    expect(user.content).not.toContain('424242');
  });

  it('a custom rubric replaces the default', () => {
    const p = buildRulerPrompt([good, bad], 'Only brevity matters.');
    expect(p.messages[0].content).toContain('Only brevity matters.');
    expect(p.messages[0].content).not.toContain(DEFAULT_RUBRIC);
  });

  it('leaves every trajectory at least one message of its own', () => {
    const short = traj('s', []);
    expect(commonPrefixLength([short.messages, good.messages])).toBe(1);
    expect(commonPrefixLength([good.messages, bad.messages])).toBe(2);
  });
});

describe('parseJudgeAnswer', () => {
  it('reads JSON in a code fence surrounded by prose, and numeric ids', () => {
    const text = 'Here you go:\n```json\n{"scores":[{"trajectory_id":2,"explanation":"x","score":0.1},{"trajectory_id":"1","explanation":"y","score":0.9}]}\n```\nThanks';
    expect(parseJudgeAnswer(text, ['1', '2'])).toEqual({ scores: [0.9, 0.1], explanations: ['y', 'x'] });
  });
  it('rejects unknown ids, duplicates and out-of-range scores with typed errors', () => {
    const mk = (xs: [string, number][]) => JSON.stringify({ scores: xs.map(([trajectory_id, score]) => ({ trajectory_id, explanation: '', score })) });
    expect(() => parseJudgeAnswer(mk([['1', 0.5], ['3', 0.5]]), ['1', '2'])).toThrow(/missing ids 2; unknown ids 3/);
    expect(() => parseJudgeAnswer(mk([['1', 0.5], ['1', 0.5]]), ['1', '2'])).toThrow(JudgeError);
    expect(() => parseJudgeAnswer(mk([['1', 1.5], ['2', 0.5]]), ['1', '2'])).toThrow(/wrong shape/);
  });
});

describe('rulerScores against a judge double', () => {
  it('valid answer: scores in trajectory order, asked with structured output', async () => {
    const d = await judgeDouble(answer({ '2': 0.1, '1': 0.9, '3': 0.4 }));
    const r = await rulerScores([good, bad, middling], judgeOpts(d));
    expect(r).toMatchObject({ scores: [0.9, 0.1, 0.4], explanations: ['why 1', 'why 2', 'why 3'], attempts: 1, cached: false });
    const body = posts(d)[0].body;
    expect(body.model).toBe('judge-double');
    expect(body.response_format.type).toBe('json_schema');
    expect(body.response_format.json_schema.schema.required).toEqual(['scores']);
  });

  it('wrong count, then valid: retried', async () => {
    const d = await judgeDouble(answer({ '1': 0.9, '2': 0.1 }), answer({ '1': 0.8, '2': 0.2, '3': 0.5 }));
    const r = await rulerScores([good, bad, middling], judgeOpts(d));
    expect(r).toMatchObject({ scores: [0.8, 0.2, 0.5], attempts: 2 });
    expect(posts(d)).toHaveLength(2);
    fault('judge answers the wrong number of scores', 'retried, then scored', `scored on attempt ${(r as { attempts: number }).attempts}`);
  });

  it('invalid JSON every time: the group is skipped after bounded retries, never thrown', async () => {
    const d = await judgeDouble();
    d.push(...Array.from({ length: 10 }, () => chatReply('I think the first one is best.')));
    const r = await rulerScores([good, bad], { ...judgeOpts(d), maxRetries: 2 });
    expect(r).toMatchObject({ skipped: true, attempts: 3 });
    expect((r as { reason: string }).reason).toMatch(/JUDGE_INVALID_OUTPUT/);
    expect(posts(d)).toHaveLength(3);
    fault('judge answers prose, not JSON, every time', 'group skipped after bounded retries, nothing thrown', `skipped after ${posts(d).length} requests: JUDGE_INVALID_OUTPUT`);
  });

  it('HTTP 500 then valid: retried; 429 then valid: retried', async () => {
    const d = await judgeDouble(httpError(500, 'boom'), httpError(429, 'slow down'), answer({ '1': 1, '2': 0 }));
    const r = await rulerScores([good, bad], judgeOpts(d));
    expect(r).toMatchObject({ scores: [1, 0], attempts: 3 });
  });

  it('permanent 500: skipped with the reason; 401: skipped at once', async () => {
    const d = await judgeDouble(httpError(500, 'down'), httpError(500, 'down'));
    const r = await rulerScores([good, bad], { ...judgeOpts(d), maxRetries: 1 });
    expect(r).toMatchObject({ skipped: true, attempts: 2 });
    expect((r as { reason: string }).reason).toMatch(/HTTP 500/);

    const d2 = await judgeDouble(httpError(401, 'bad key'), answer({ '1': 1, '2': 0 }));
    const r2 = await rulerScores([good, bad], judgeOpts(d2));
    expect(r2).toMatchObject({ skipped: true, attempts: 1 });
    expect(posts(d2)).toHaveLength(1);
    fault('judge answers HTTP 500 every time (401 once)', 'group skipped with the reason (401: at once)', 'skipped: HTTP 500 after 2 attempts; 401 after 1');
  });

  it('an endpoint that rejects json_schema gets the same prompt without it', async () => {
    const d = await judgeDouble(httpError(400, 'response_format json_schema is not supported'), chatReply('```json\n{"scores":[{"trajectory_id":"1","explanation":"","score":0.7},{"trajectory_id":"2","explanation":"","score":0.3}]}\n```'));
    const r = await rulerScores([good, bad], judgeOpts(d));
    expect(r).toMatchObject({ scores: [0.7, 0.3], attempts: 1 });
    expect(posts(d)[1].body.response_format).toBeUndefined();
    expect(posts(d)[1].body.messages).toEqual(posts(d)[0].body.messages);
  });

  it('identical trajectories are judged once and share the score', async () => {
    const d = await judgeDouble(answer({ '1': 0.6 }));
    const twins = [traj('x', [call('same')]), traj('y', [call('same')]), traj('z', [call('same')])];
    const r = await rulerScores(twins, judgeOpts(d));
    expect(r).toMatchObject({ scores: [0.6, 0.6, 0.6], explanations: ['why 1', 'why 1', 'why 1'] });
    const user = posts(d)[0].body.messages[1].content as string;
    expect(countOf(user, '<trajectory id=')).toBe(1);
  });

  it('duplicates within a group are judged once each', async () => {
    const d = await judgeDouble(answer({ '1': 0.9, '2': 0.2 }));
    const r = await rulerScores([good, bad, traj('g2', good.messages.slice(2))], judgeOpts(d));
    expect(r).toMatchObject({ scores: [0.9, 0.2, 0.9] });
    expect(countOf(posts(d)[0].body.messages[1].content, '<trajectory id=')).toBe(2);
  });

  it('caches answers on disk by request hash, so re-scoring is free', async () => {
    const cacheDir = await mkdtemp(path.join(tmpdir(), 'ruler-cache-'));
    try {
      const d = await judgeDouble(answer({ '1': 0.9, '2': 0.1 }));
      const first = await rulerScores([good, bad], { ...judgeOpts(d), cacheDir });
      const again = await rulerScores([good, bad], { ...judgeOpts(d), cacheDir });
      expect(first).toMatchObject({ scores: [0.9, 0.1], cached: false });
      expect(again).toMatchObject({ scores: [0.9, 0.1], cached: true, attempts: 0 });
      expect(posts(d)).toHaveLength(1);
      expect(await readdir(cacheDir)).toHaveLength(1);
      // A different group is a different request: the cache does not answer it (the double has nothing left: 500s).
      const other = await rulerScores([good, middling], { ...judgeOpts(d), cacheDir, maxRetries: 0 });
      expect(other).toMatchObject({ skipped: true });
    } finally {
      await rm(cacheDir, { recursive: true, force: true });
    }
  });
});
