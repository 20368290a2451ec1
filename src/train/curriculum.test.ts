import { describe, expect, it } from 'vitest';
import { createRng } from '../util/rng.js';
import type { Scenario } from '../scenarios/scenario.js';
import { Curriculum, CurriculumStateSchema } from './curriculum.js';

const scenario = (id: string): Scenario => ({ id, task: `task ${id}`, difficulty: 1, source: 'schema' });

describe('Curriculum', () => {
  it('smooths pass rates, decays old groups and saves its records', () => {
    const c = new Curriculum([scenario('a'), scenario('b')]);
    expect(c.passRate('a')).toBe(0.5); // never tried
    c.record('a', 8, 0);
    expect(c.passRate('a')).toBeCloseTo(1 / 10, 12);
    c.record('a', 8, 8); // the older group counts half: attempts 4 + 8, successes 0 + 8
    expect(c.passRate('a')).toBeCloseTo(9 / 14, 12);
    const saved = CurriculumStateSchema.parse(JSON.parse(JSON.stringify(c.state())));
    expect(saved).toEqual({ a: { attempts: 12, successes: 8 } });
    expect(new Curriculum([scenario('a')], saved).passRate('a')).toBeCloseTo(9 / 14, 12);
  });

  it('weights a scenario solved half the time above ones always failed or always solved', () => {
    const c = new Curriculum([scenario('half'), scenario('never'), scenario('always')]);
    c.record('half', 8, 4);
    c.record('never', 8, 0);
    c.record('always', 8, 8);
    expect(c.weight('half')).toBeCloseTo(0.02 + 0.25, 12);
    expect(c.weight('never')).toBeCloseTo(0.02 + 0.09, 12);
    expect(c.weight('always')).toBeCloseTo(c.weight('never'), 12);
  });

  it('draws without replacement, in proportion to the weights, never an excluded scenario', () => {
    const ids = ['half', 'never', 'always', 'new'];
    const c = new Curriculum(ids.map(scenario));
    c.record('half', 8, 4);
    c.record('never', 8, 0);
    c.record('always', 8, 8);
    const rng = createRng(5);
    const counts = new Map(ids.map((id) => [id, 0]));
    const draws = 20000;
    for (let i = 0; i < draws; i++) {
      const [s] = c.pick(1, rng);
      counts.set(s.id, counts.get(s.id)! + 1);
    }
    const total = ids.reduce((a, id) => a + c.weight(id), 0);
    for (const id of ids) {
      // A binomial frequency: within 5 standard deviations (at most 0.018 here) of its probability.
      const p = c.weight(id) / total;
      expect(Math.abs(counts.get(id)! / draws - p)).toBeLessThanOrEqual(5 * Math.sqrt((p * (1 - p)) / draws));
    }
    const two = c.pick(3, rng, new Set(['half']));
    expect(two.map((s) => s.id).sort()).toEqual(['always', 'never', 'new']);
    expect(c.pick(10, rng).map((s) => s.id).sort()).toEqual([...ids].sort());
  });
});
