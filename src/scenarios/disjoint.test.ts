import { describe, expect, it } from 'vitest';
import { assertDisjoint, entityKey, findOverlaps } from './disjoint.js';
import type { Scenario } from './scenario.js';

const s = (id: string, task: string, tool?: string, args?: Record<string, unknown>): Scenario => ({
  id, task, difficulty: 1, source: 'schema', ...(tool ? { checks: [{ kind: 'tool_called', tool, args: args ?? {} }] } : {}),
});

describe('disjoint scenario sets', () => {
  const train = [s('t1', 'What is the year of the book bk-001?', 'get_book', { book_id: 'bk-001' })];

  it('accepts sets about other entities with other phrasings', () => {
    const val = [s('v1', 'Look up the book bk-002 and give me its title.', 'get_book', { book_id: 'bk-002' })];
    expect(findOverlaps(val, { train })).toEqual([]);
    expect(() => assertDisjoint('validation', val, { train })).not.toThrow();
  });

  it('refuses the same entity (argument order does not matter) and near-duplicate tasks, naming both scenarios', () => {
    const sameEntity = s('v2', 'Tell me the genre of bk-001.', 'get_book', { book_id: 'bk-001' });
    const sameTask = s('v3', 'What is the year of the book bk-001', 'check_stock', { book_id: 'bk-009' });
    const overlaps = findOverlaps([sameEntity, sameTask], { train });
    expect(overlaps.map((o) => [o.heldOut.id, o.reason])).toEqual([['v2', 'entity'], ['v3', 'task']]);
    expect(() => assertDisjoint('validation', [sameEntity], { train })).toThrow(/validation scenario v2 is about the same entity as train scenario t1/);
    expect(entityKey(s('x', 't', 'f', { a: 1, b: 2 }))).toBe(entityKey(s('y', 'u', 'f', { b: 2, a: 1 })));
  });
});
