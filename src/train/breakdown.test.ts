import { describe, expect, it } from 'vitest';
import type { Scenario } from '../scenarios/scenario.js';
import { kindBreakdown, scenarioKind, scenarioSurface, successBreakdown } from './breakdown.js';

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

describe('kindBreakdown', () => {
  it('gives one row per tool shape and difficulty together, by shape then difficulty', () => {
    const scenarios = [s('a', 2, 'get_book'), s('b', 1, 'get_book'), s('c', 1, 'get_book'), s('d', 4, 'get_book', 'convert_price'), s('e', 1, 'add')];
    expect(scenarioKind(scenarios[3])).toBe('get_book → convert_price @4');
    const before = [{ scenario_id: 'a', success: false }, { scenario_id: 'b', success: true }, { scenario_id: 'c', success: false }, { scenario_id: 'e', success: false }];
    const after = [{ scenario_id: 'a', success: true }, { scenario_id: 'b', success: true }, { scenario_id: 'c', success: true }, { scenario_id: 'd', success: false }];
    expect(kindBreakdown(scenarios, [before, after])).toEqual([
      { surface: 'add', difficulty: 1, scenarios: 1, success: [0, null] },
      { surface: 'get_book', difficulty: 1, scenarios: 2, success: [0.5, 1] },
      { surface: 'get_book', difficulty: 2, scenarios: 1, success: [0, 1] },
      { surface: 'get_book → convert_price', difficulty: 4, scenarios: 1, success: [null, 0] },
    ]);
  });
});
