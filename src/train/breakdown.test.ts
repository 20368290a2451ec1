import { describe, expect, it } from 'vitest';
import type { Scenario } from '../scenarios/scenario.js';
import { scenarioSurface, successBreakdown } from './breakdown.js';

const s = (id: string, difficulty: number, ...tools: string[]): Scenario => ({
  id, task: id, difficulty, source: 'schema', checks: [...tools.map((tool) => ({ kind: 'tool_called' as const, tool, args: {} })), { kind: 'answer_contains', value: 'x' }],
});

describe('successBreakdown', () => {
  const scenarios = [s('a', 1, 'get_book'), s('b', 1, 'get_book'), s('c', 4, 'get_book', 'convert_price'), s('d', 2, 'search_books')];

  it('names a chain by its checked tools in order', () => {
    expect(scenarioSurface(scenarios[2])).toBe('get_book → convert_price');
    expect(scenarioSurface({ checks: [{ kind: 'answer_contains', value: 'x' }] })).toBe('(no tool check)');
  });

  it('gives one row per tool chain and per difficulty, with a success rate per column', () => {
    const before = [{ scenario_id: 'a', success: true }, { scenario_id: 'b', success: false }, { scenario_id: 'c', success: false }, { scenario_id: 'd', success: false }];
    const after = [{ scenario_id: 'a', success: true }, { scenario_id: 'b', success: true }, { scenario_id: 'c', success: true }];
    expect(successBreakdown(scenarios, [before, after])).toEqual([
      { by: 'tool', key: 'get_book', scenarios: 2, success: [0.5, 1] },
      { by: 'tool', key: 'get_book → convert_price', scenarios: 1, success: [0, 1] },
      { by: 'tool', key: 'search_books', scenarios: 1, success: [0, null] },
      { by: 'difficulty', key: '1', scenarios: 2, success: [0.5, 1] },
      { by: 'difficulty', key: '2', scenarios: 1, success: [0, null] },
      { by: 'difficulty', key: '4', scenarios: 1, success: [0, 1] },
    ]);
  });
});
