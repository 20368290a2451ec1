import { describe, expect, it } from 'vitest';
import { advantagesFor, groupAdvantages } from './advantages.js';

describe('groupAdvantages', () => {
  it('centres each group and divides by its population standard deviation', () => {
    const { advantages, kept, droppedZeroVariance } = groupAdvantages([[1, 0, 0, 1], [0.2, 0.4, 0.9]]);
    expect(kept).toEqual([0, 1]);
    expect(droppedZeroVariance).toBe(0);
    expect(advantages[0]).toEqual([1, -1, -1, 1].map((x) => expect.closeTo(x, 5)));
    // Independent check: standardised values have mean 0 and population variance 1.
    const a = advantages[1];
    const mean = a.reduce((s, x) => s + x, 0) / a.length;
    expect(mean).toBeCloseTo(0, 9);
    expect(a.reduce((s, x) => s + x * x, 0) / a.length).toBeCloseTo(1, 4);
    expect(a[2]).toBeGreaterThan(a[1]);
  });

  it('drops and counts zero-variance groups, keeps raw differences without std normalisation', () => {
    const r = groupAdvantages([[0.5, 0.5], [1, 1, 1], [0, 1]], { normalizeStd: false });
    expect(r.droppedZeroVariance).toBe(2);
    expect(r.kept).toEqual([2]);
    expect(r.advantages).toEqual([[-0.5, 0.5]]);
  });

  it('refuses non-finite rewards, naming the group', () => {
    expect(() => groupAdvantages([[0, 1], [NaN, 1]])).toThrow(/group 1: reward NaN/);
  });
});

describe('advantagesFor (the rule train() applies per loss)', () => {
  it('dr_grpo centres each group without dividing by its standard deviation', () => {
    // Rewards 0 and 0.5: the centred values are ±0.25; divided by the std (0.25) they would be ±1.
    const r = advantagesFor('dr_grpo', [[0, 0.5], [1, 1], [0.2, 0.4, 0.9]]);
    expect(r.kept).toEqual([0, 2]);
    expect(r.advantages[0]).toEqual([-0.25, 0.25]);
    expect(r.advantages[1]).toEqual([0.2 - 0.5, 0.4 - 0.5, 0.9 - 0.5].map((x) => expect.closeTo(x, 12)));
  });

  it('every other loss divides by the standard deviation, as GRPO does', () => {
    for (const loss of ['grpo', 'dapo', 'cispo', 'gspo'] as const) {
      expect(advantagesFor(loss, [[0, 0.5]]).advantages[0], loss).toEqual([-1, 1].map((x) => expect.closeTo(x, 4)));
    }
  });
});
