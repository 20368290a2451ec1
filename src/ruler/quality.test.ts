import { describe, expect, it } from 'vitest';
import type { Scenario } from '../scenarios/scenario.js';
import { formatQuality, isChain } from './quality.js';

const scenario = (task: string, args: Record<string, unknown>): Scenario => ({
  id: 's',
  task,
  difficulty: 1,
  source: 'schema',
  checks: [{ kind: 'answer_value', value: 'Dune', via: [{ tool: 'get_book', args }] }],
});

describe('quality of a scenario set', () => {
  it('a chain is a task whose checked call takes a value the task does not state', () => {
    expect(isChain(scenario('What is the title of the book bk-021?', { book_id: 'bk-021' }))).toBe(false);
    expect(isChain(scenario('What is the year of the book "Dune"?', { book_id: 'bk-021' }))).toBe(true);
    expect(isChain({ ...scenario('Hello there', {}), checks: [{ kind: 'answer_contains', value: 'x' }] })).toBe(false);
  });

  it('renders the data it is given', () => {
    const text = formatQuality({ scenarios: 9, namingTool: 1, chains: 2, measured: 7, oraclePassIdleFail: 6, randomPass: 3 }).join('\n');
    expect(text).toMatch(/9 tasks: 1 name a tool, 2 chains/);
    expect(text).toMatch(/of 7 read-only tasks: 6 passed by an oracle and failed by a do-nothing agent, 3 passed by one random call/);
  });
});
