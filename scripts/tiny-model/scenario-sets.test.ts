import { describe, expect, it } from 'vitest';
import { connect } from '../../src/mcp/index.js';
import type { Scenario } from '../../src/scenarios/index.js';
import { fixtureTarget } from './fixture-target.js';
import { drawWarmup, fairScenario, roundRobin, stratum } from './scenario-sets.js';

const question: Scenario = {
  id: 'q', task: 'What is the title of the book bk-021?', difficulty: 1, source: 'schema',
  checks: [{ kind: 'answer_value', value: 'The Distant Comet', via: [{ tool: 'get_book', args: { book_id: 'bk-021' } }] }],
};
const call: Scenario = {
  id: 'c', task: 'Check the stock of the book bk-002.', difficulty: 1, source: 'schema',
  checks: [{ kind: 'tool_called', tool: 'check_stock', args: { book_id: 'bk-002' } }],
};

describe('scenario sets: where a scenario’s calls are read from', () => {
  it('keeps a question checked by its value only when its calls are read from `via` (the general recipe)', () => {
    expect(fairScenario(question)).toBe(false);
    expect(fairScenario(question, 'via')).toBe(true);
    expect(stratum(question, 'via')).toBe('get_book d1');
    expect(stratum(question)).toBe(' d1');
  });

  it('reads a checked call the same way either way', () => {
    expect(fairScenario(call)).toBe(true);
    expect(fairScenario(call, 'via')).toBe(true);
    expect(stratum(call, 'via')).toBe(stratum(call));
    expect(roundRobin([question, call], 2, 'via').map((s) => s.id)).toEqual(['c', 'q']);
  });
});

describe('scenario sets: the warm-up draw on the fixture server', () => {
  // The build reads calls from `via`: today's tasks name no tool and questions carry answer_value checks, so the
  // draw must still find what it asks for (reading checked calls alone, it found none).
  it('draws the warm-up scenarios asked for, questions and chains among them', async () => {
    const session = await connect(fixtureTarget());
    try {
      const warmup = await drawWarmup(session, 1, 40, 'via');
      expect(warmup).toHaveLength(40);
      expect(warmup.some((s) => s.checks?.some((c) => c.kind === 'answer_value'))).toBe(true);
      expect(new Set(warmup.map((s) => stratum(s, 'via'))).size).toBeGreaterThan(5);
    } finally {
      await session.close();
    }
  }, 120_000);
});
