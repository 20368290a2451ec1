import { describe, expect, it } from 'vitest';
import { DEFAULT_DUPLICATE_THRESHOLD, DuplicateFilter } from './dedup.js';
import { assertDisjoint, entityKey, findOverlaps, overlapCheckUnits, overlapGroups } from './disjoint.js';
import type { Scenario } from './scenario.js';
import { splitScenarios } from './split.js';

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

describe('the overlap index', () => {
  // Tasks from a small vocabulary, so that near-duplicates (and concrete values shared by chance) are common.
  const words = ['find', 'the', 'book', 'author', 'year', 'price', 'title', 'list', 'every', 'member', 'loan', 'branch', 'city', 'of', 'x-1', 'x-2'];
  const randomSet = (rng: () => number, n: number, prefix: string): Scenario[] =>
    Array.from({ length: n }, (_, i) => {
      const task = Array.from({ length: 1 + Math.floor(rng() * 7) }, () => words[Math.floor(rng() * words.length)]).join(' ');
      return rng() < 0.3 ? s(`${prefix}${i}`, task, 'get', { id: Math.floor(rng() * 20) }) : s(`${prefix}${i}`, task);
    });
  const lcg = (seed: number) => () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);

  it('finds exactly the overlaps that comparing every pair finds', () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const rng = lcg(seed);
      const train = randomSet(rng, 300, 't');
      const val = randomSet(rng, 100, 'v');
      const brute = val.flatMap((v) => {
        const k = entityKey(v);
        const entity = k === undefined ? undefined : train.find((t) => entityKey(t) === k);
        const task = train.find((t) => new DuplicateFilter(DEFAULT_DUPLICATE_THRESHOLD, [t.task]).isDuplicate(v.task));
        const hit = entity ?? task;
        return hit ? [[v.id, hit.id, entity ? 'entity' : 'task']] : [];
      });
      expect(brute.filter((b) => b[2] === 'task').length).toBeGreaterThan(5);
      expect(findOverlaps(val, { train }).map((o) => [o.heldOut.id, o.other.id, o.reason])).toEqual(brute);
    }
  });

  it('groups overlapping scenarios, so that the split keeps each group on one side and passes the check', () => {
    for (const seed of [1, 2, 3]) {
      const set = randomSet(lcg(seed), 200, 's');
      const groups = overlapGroups(set);
      expect(groups.flat().sort((a, b) => a - b)).toEqual(set.map((_, i) => i));
      const { train, val } = splitScenarios(set, { seed });
      expect(train.length + val.length).toBe(set.length);
      expect(val.length).toBeGreaterThan(0);
      expect(findOverlaps(val, { train })).toEqual([]);
    }
  });
});

describe('progress of the held-out check', () => {
  it('counts the scenarios indexed and checked, from 0 to the total, never backwards', () => {
    const train = Array.from({ length: 9000 }, (_, i) => s(`t${i}`, `What is the year of the book bk-${i}?`, 'get_book', { book_id: `bk-${i}` }));
    const val = Array.from({ length: 5000 }, (_, i) => s(`v${i}`, `What is the title of the book vb-${i}?`, 'get_book', { book_id: `vb-${i}` }));
    const seen: [number, number][] = [];
    expect(findOverlaps(val, { train, 'warm-up': [] }, DEFAULT_DUPLICATE_THRESHOLD, (d, t) => seen.push([d, t]))).toEqual([]);
    expect(overlapCheckUnits(val, { train, 'warm-up': [] })).toBe(14_000);
    expect(seen.every(([, t]) => t === 14_000)).toBe(true);
    expect(seen.at(-1)![0]).toBe(14_000);
    expect(seen.length).toBeGreaterThan(2);
    expect(seen.every(([d], i) => i === 0 || d >= seen[i - 1][0])).toBe(true);
  });
});
