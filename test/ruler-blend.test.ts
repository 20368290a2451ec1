/** Verifiable checks scoring and reward blending (pure functions; no servers or doubles needed). */
import { describe, expect, it } from 'vitest';
import type { ChatMessage } from '../src/agent/policy.js';
import { INVALID_CALL_PREFIX, type McpTrajectory } from '../src/agent/trajectory.js';
import { blendRewards } from '../src/ruler/blend.js';
import { scoreChecks, type ChecksScore } from '../src/ruler/checks.js';
import type { Scenario } from '../src/scenarios/scenario.js';

const scenario: Scenario = {
  id: 's',
  task: 'Price of bk-003 in EUR?',
  difficulty: 2,
  source: 'schema',
  checks: [
    { kind: 'tool_called', tool: 'get_book', args: { book_id: 'bk-003' } },
    { kind: 'tool_called', tool: 'convert_price', args: { currency: 'EUR' } },
    { kind: 'answer_contains', value: '12.87' },
  ],
};

function traj(messages: ChatMessage[], finalAnswer: string | null): McpTrajectory {
  return {
    id: 't',
    scenario_id: 's',
    messages,
    tools: [],
    final_answer: finalAnswer,
    reward: 0,
    reward_components: {},
    metrics: { turns: 1, tool_calls: 0, tool_errors: 0, invalid_calls: 0, completed: true, ran_out_of_turns: false, latency_ms: 0 },
    logs: [],
  };
}
const assistantCalls = (...calls: [string, string, string][]): ChatMessage => ({
  role: 'assistant',
  content: null,
  tool_calls: calls.map(([id, name, args]) => ({ id, type: 'function', function: { name, arguments: args } })),
});
const toolAnswer = (id: string, content: string): ChatMessage => ({ role: 'tool', tool_call_id: id, content });

describe('scoreChecks', () => {
  it('counts executed calls with matching arguments and the final answer', () => {
    const t = traj(
      [
        assistantCalls(['1', 'get_book', '{"book_id":"BK-003 "}'], ['2', 'convert_price', '{"amount":13.99,"currency":"EUR"}']),
        toolAnswer('1', '{}'),
        toolAnswer('2', '{}'),
      ],
      'It is 12.87 EUR.',
    );
    expect(scoreChecks(t, scenario)).toEqual({ passed: 3, total: 3, fraction: 1, credit: 1, results: [true, true, true] });
  });

  it('ignores calls the loop rejected, and a missing answer fails answer_contains', () => {
    const t = traj(
      [assistantCalls(['1', 'get_book', '{"book_id":"bk-003","extra":1}']), toolAnswer('1', `${INVALID_CALL_PREFIX} extra property`)],
      null,
    );
    expect(scoreChecks(t, scenario)).toMatchObject({ passed: 0, total: 3, fraction: 0 });
  });

  it('answer_value: the answer holds the value and an executed result of any tool gave it', () => {
    const byValue: Scenario = {
      id: 'v',
      task: 'What is the title of the book bk-021?',
      difficulty: 1,
      source: 'schema',
      checks: [{ kind: 'answer_value', value: 'Dune', via: [{ tool: 'check_stock', args: { book_id: 'bk-021' } }] }],
    };
    const asked = (tool: string, result: string, answer: string | null, execution?: 'executed' | 'not_executed' | 'unknown') =>
      traj([assistantCalls(['1', tool, '{"book_id":"bk-021"}']), { ...toolAnswer('1', result), ...(execution ? { execution } : {}) }], answer);
    // Another tool than the one generation read the value from.
    expect(scoreChecks(asked('get_book', '{"title":"Dune"}', 'It is Dune.'), byValue).results).toEqual([true]);
    expect(scoreChecks(asked('check_stock', '{"title":"Dune","stock":3}', 'Dune', 'executed'), byValue).results).toEqual([true]);
    // Known without asking the server, or from a call the server did not execute: no pass.
    expect(scoreChecks(asked('get_book', '{"title":"Foundation"}', 'It is Dune.'), byValue).results).toEqual([false]);
    expect(scoreChecks(asked('get_book', '{"title":"Dune"}', 'It is Dune.', 'unknown'), byValue).results).toEqual([false]);
    expect(scoreChecks(asked('get_book', '{"title":"Dune"}', null), byValue).results).toEqual([false]);
    // complete_task's answer echoes the summary: it is no tool result.
    const echoed = traj([assistantCalls(['9', 'complete_task', '{"summary":"Dune"}']), { role: 'tool', tool_call_id: '9', name: 'complete_task', content: 'Dune', execution: 'executed' }], 'Dune');
    expect(scoreChecks(echoed, byValue).results).toEqual([false]);
  });

  it('answer_value with others: an answer that also holds another entity\'s value (a pasted listing) fails', () => {
    const country: Scenario = { id: 'c', task: 'Which country is Kenji Watanabe from?', difficulty: 1, source: 'schema', checks: [{ kind: 'answer_value', value: 'Japan', others: ['Russia', 'Sweden'] }] };
    const listing = '[{"name":"Kenji Watanabe","country":"Japan"},{"name":"Elena Petrova","country":"Russia"}]';
    const said = (answer: string) => traj([assistantCalls(['1', 'list_authors', '{}']), toolAnswer('1', listing)], answer);
    expect(scoreChecks(said('Japan.'), country).results).toEqual([true]);
    expect(scoreChecks(said(listing), country).results).toEqual([false]);
  });

  it('answer_value on a number: compared as a number, in the answer and in the result', () => {
    const temp: Scenario = { id: 't', task: 'Temperature in Oslo?', difficulty: 1, source: 'schema', checks: [{ kind: 'answer_value', value: '33' }] };
    const said = (result: string, answer: string) => traj([assistantCalls(['1', 'weather', '{"city":"Oslo"}']), toolAnswer('1', result)], answer);
    expect(scoreChecks(said('{"temp":33}', 'It is 33 °C'), temp).results).toEqual([true]);
    expect(scoreChecks(said('{"temp":33}', 'It is 2033 °C'), temp).results).toEqual([false]);
    expect(scoreChecks(said('{"temp":2033}', 'It is 33 °C'), temp).results).toEqual([false]);
    const precise: Scenario = { ...temp, checks: [{ kind: 'answer_value', value: '12.87', tolerance: 0.01 }] };
    expect(scoreChecks(said('{"price":12.87}', 'about 12.88'), precise).results).toEqual([true]);
  });

  it('old checks score as before: answer_contains needs no tool result', () => {
    const t = traj([assistantCalls(['1', 'get_book', '{"book_id":"bk-003"}'], ['2', 'convert_price', '{"currency":"EUR"}']), toolAnswer('1', '{}'), toolAnswer('2', '{}')], '12.87');
    expect(scoreChecks(t, scenario).results).toEqual([true, true, true]);
  });

  it('credit: a failed answer check earns the share of its multi-word value the answer states, success unchanged', () => {
    const record = '{"id":"au-02","name":"Kenji Watanabe","country":"Japan","book_ids":["bk-002","bk-014"]}';
    const name: Scenario = {
      id: 'n', task: 'Tell me the name for the author au-02.', difficulty: 1, source: 'schema',
      checks: [{ kind: 'tool_called', tool: 'get_author', args: { author_id: 'au-02' } }, { kind: 'answer_contains', value: 'Kenji Watanabe' }],
    };
    const said = (answer: string, result = record) => traj([assistantCalls(['1', 'get_author', '{"author_id":"au-02"}']), toolAnswer('1', result)], answer);
    expect(scoreChecks(said('Kenji Watanabe'), name)).toMatchObject({ passed: 2, fraction: 1, credit: 1 });
    // One word of two: half the answer check, the call whole; still no success.
    expect(scoreChecks(said('Watanabe'), name)).toMatchObject({ passed: 1, fraction: 0.5, credit: 0.75, results: [true, false] });
    expect(scoreChecks(said('bk-002, bk-014'), name)).toMatchObject({ passed: 1, credit: 0.5 });
    // Every word but not the value as written: below a pass.
    expect(scoreChecks(said('Watanabe, Kenji'), name).credit).toBe(0.75);
    // A word no executed result holds whole (guessed, or of another record) earns nothing.
    expect(scoreChecks(said('Watanabe', '{"id":"au-06","name":"Daniel Reyes"}'), name).credit).toBe(0.5);
    expect(scoreChecks(traj([], 'Kenji'), name).credit).toBe(0);
    // Words the task holds earn nothing; a one-word value or a number is all or nothing.
    const title: Scenario = { id: 'l', task: 'Using query "Last", search books and give me the title of every book.', difficulty: 2, source: 'schema', checks: [{ kind: 'answer_contains', value: 'The Last Orchard' }] };
    const found = (answer: string) => traj([assistantCalls(['1', 'search_books', '{"query":"Last"}']), toolAnswer('1', '[{"title":"The Last Orchard"}]')], answer);
    expect(scoreChecks(found('The Last'), title).credit).toBe(0);
    expect(scoreChecks(found('Orchard'), title).credit).toBeCloseTo(1 / 3, 12);
    const one = (value: string, result: string, answer: string) =>
      scoreChecks(traj([assistantCalls(['1', 'get_book', '{}']), toolAnswer('1', result)], answer), { ...title, task: 'Which?', checks: [{ kind: 'answer_contains', value }] }).credit;
    expect(one('bk-004', '["bk-004"]', 'bk-014')).toBe(0);
    expect(one('12.87', '{"price":12.87}', '12')).toBe(0);
    // answer_value: an answer holding another entity's value earns nothing.
    const listed: Scenario = { ...name, checks: [{ kind: 'answer_value', value: 'Kenji Watanabe', others: ['Elena Petrova'] }] };
    const listing = '[{"name":"Kenji Watanabe"},{"name":"Elena Petrova"}]';
    expect(scoreChecks(said('Watanabe', listing), listed).credit).toBe(0.5);
    expect(scoreChecks(said('Watanabe, Elena Petrova', listing), listed).credit).toBe(0);
  });

  it('a scenario without checks scores total 0', () => {
    expect(scoreChecks(traj([], 'x'), { ...scenario, checks: undefined })).toMatchObject({ passed: 0, total: 0 });
  });
});

describe('blendRewards', () => {
  const checks = (...fractions: number[]): ChecksScore[] =>
    fractions.map((f) => ({ passed: Math.round(f * 4), total: 4, fraction: f, credit: f, results: [] }));
  const group = () => [traj([], 'a'), traj([], 'b')];
  const ruler = { scores: [0.8, 0.2], explanations: ['', ''], attempts: 1, cached: false };
  const skipped = { skipped: true as const, reason: 'judge down', attempts: 4 };

  it('blend: 0.5/0.5 by default, each component kept', () => {
    const g = group();
    expect(blendRewards(g, { mode: 'blend', ruler, checks: checks(1, 0.5) })).toEqual({ scored: true });
    expect(g.map((t) => t.reward)).toEqual([0.9, 0.35]);
    expect(g[0].reward_components).toEqual({ ruler: 0.8, checks: 1 });
    expect(g[1].metrics).toMatchObject({ checks_passed: 2, checks_total: 4 });
  });

  it('blend honours rulerWeight', () => {
    const g = group();
    blendRewards(g, { mode: 'blend', ruler, checks: checks(1, 0), rulerWeight: 0.25 });
    expect(g[0].reward).toBeCloseTo(0.25 * 0.8 + 0.75, 12);
    expect(g[1].reward).toBeCloseTo(0.25 * 0.2, 12);
  });

  it('ruler and checks modes use one component but keep both', () => {
    const g1 = group();
    blendRewards(g1, { mode: 'ruler', ruler, checks: checks(0, 1) });
    expect(g1.map((t) => t.reward)).toEqual([0.8, 0.2]);
    expect(g1[1].reward_components).toEqual({ ruler: 0.2, checks: 1 });
    const g2 = group();
    blendRewards(g2, { mode: 'checks', ruler, checks: checks(0, 1) });
    expect(g2.map((t) => t.reward)).toEqual([0, 1]);
  });

  it('blend falls back to the component that exists, and says so', () => {
    const g = group();
    expect(blendRewards(g, { mode: 'blend', ruler: skipped, checks: checks(1, 0.25) })).toEqual({ scored: true });
    expect(g.map((t) => t.reward)).toEqual([1, 0.25]);
    expect(g[0].reward_components).toEqual({ checks: 1 });
    expect(g[0].logs.at(-1)).toMatch(/only the checks component/);
  });

  it('a failed judge in ruler mode marks the group unscored instead of giving zeros silently', () => {
    const g = group();
    const out = blendRewards(g, { mode: 'ruler', ruler: skipped, checks: checks(1, 1) });
    expect(out).toEqual({ scored: false, reason: 'judge failed: judge down' });
    expect(g.every((t) => t.unscored === 'judge failed: judge down')).toBe(true);
    expect(g[0].reward_components).toEqual({ checks: 1 });
  });

  it('the checks component is the credit, partial answers included, not the fraction passed', () => {
    const g = group();
    blendRewards(g, { mode: 'checks', checks: [{ passed: 1, total: 2, fraction: 0.5, credit: 0.75, results: [true, false] }, { passed: 1, total: 2, fraction: 0.5, credit: 0.5, results: [true, false] }] });
    expect(g.map((t) => t.reward)).toEqual([0.75, 0.5]);
    expect(g[0].metrics).toMatchObject({ checks_passed: 1, checks_total: 2 });
  });

  it('checks mode on a scenario without checks is unscored', () => {
    const g = group();
    expect(blendRewards(g, { mode: 'checks', ruler }).scored).toBe(false);
    expect(g[0].unscored).toMatch(/no checks/);
  });
});
