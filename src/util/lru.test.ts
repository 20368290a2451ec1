import { describe, expect, it } from 'vitest';
import { LruCache } from './lru.js';

describe('LruCache', () => {
  it('drops the least recently used entry past maxEntries (a get counts as a use)', () => {
    const c = new LruCache<string, number>({ maxEntries: 2 });
    c.set('a', 1);
    c.set('b', 2);
    expect(c.get('a')).toBe(1);
    c.set('c', 3);
    expect([c.get('a'), c.get('b'), c.get('c')]).toEqual([1, undefined, 3]);
    expect(c.size).toBe(2);
  });

  it('keeps the total weight under maxWeight, and never keeps an entry heavier than that', () => {
    const c = new LruCache<string, string>({ maxEntries: 100, maxWeight: 10, weigh: (k, v) => k.length + v.length });
    c.set('a', 'xxxx'); // 5
    c.set('b', 'yyyy'); // 10 in all
    c.set('c', 'z'); // 12: 'a' goes
    expect([c.get('a'), c.get('b'), c.get('c')]).toEqual([undefined, 'yyyy', 'z']);
    c.set('d', 'w'.repeat(10));
    expect(c.get('d')).toBeUndefined();
    expect(c.size).toBe(2);
    // Replacing an entry counts its new weight only.
    c.set('b', 'y');
    c.set('e', 'eeee');
    expect([c.get('b'), c.get('c'), c.get('e')]).toEqual(['y', 'z', 'eeee']);
  });
});
