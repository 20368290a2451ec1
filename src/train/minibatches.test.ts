import { describe, expect, it } from 'vitest';
import { minibatches } from './minibatches.js';

describe('minibatches', () => {
  it('keeps each group whole and deals groups round-robin', () => {
    const groups = [['a1', 'a2'], ['b1'], ['c1', 'c2', 'c3'], ['d1']];
    expect(minibatches(groups, 2)).toEqual([['a1', 'a2', 'c1', 'c2', 'c3'], ['b1', 'd1']]);
    expect(minibatches(groups, 1)).toEqual([['a1', 'a2', 'b1', 'c1', 'c2', 'c3', 'd1']]);
  });

  it('never makes more minibatches than groups, nor empty ones', () => {
    expect(minibatches([['a'], ['b']], 5)).toEqual([['a'], ['b']]);
    expect(minibatches([['a'], []], 2)).toEqual([['a']]);
    expect(minibatches([], 3)).toEqual([]);
  });
});
