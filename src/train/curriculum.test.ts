import { describe, expect, it } from 'vitest';
import { createRng } from '../util/rng.js';
import type { Scenario } from '../scenarios/scenario.js';
import { Curriculum, CurriculumStateSchema } from './curriculum.js';

const scenario = (id: string, difficulty = 1): Scenario => ({ id, task: `task ${id}`, difficulty, source: 'schema' });
// A scenario checked by one call of `tool`: its kind is the tool and the difficulty.
const calling = (id: string, tool: string, difficulty = 1): Scenario => ({ ...scenario(id, difficulty), checks: [{ kind: 'tool_called', tool, args: {} }] });

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
    // Each alone of its kind (difficulties differ), so each pass rate is its own record's.
    const c = new Curriculum([scenario('half', 1), scenario('never', 2), scenario('always', 3)]);
    c.record('half', 8, 4);
    c.record('never', 8, 0);
    c.record('always', 8, 8);
    expect(c.weight('half')).toBeCloseTo(0.005 + 0.25, 12);
    expect(c.weight('never')).toBeCloseTo(0.005 + 0.09, 12);
    expect(c.weight('always')).toBeCloseTo(c.weight('never'), 12);
  });

  it('sharpens the weight with its power: floor + (p (1 - p))^k', () => {
    const c = new Curriculum([scenario('half', 1), scenario('never', 2)], {}, { power: 2 });
    c.record('half', 8, 4);
    c.record('never', 8, 0);
    // Alone of its kind, 0 of 8 gives p = (0 + 2 × ½) / (8 + 2) = 0.1, so p (1 − p) = 0.09.
    expect(c.weight('half')).toBeCloseTo(0.005 + 0.25 ** 2, 12);
    expect(c.weight('never')).toBeCloseTo(0.005 + 0.09 ** 2, 12);
    expect(() => new Curriculum([], {}, { power: 0 })).toThrow(/power must be > 0/);
  });

  it("lends a scenario its kind's pass rate: the same checked tools and difficulty, not the scenario's own record", () => {
    const set = [calling('solved-1', 'get_book'), calling('solved-2', 'get_book'), calling('new', 'get_book'), calling('harder', 'get_book', 2), calling('other', 'check_stock')];
    const c = new Curriculum(set);
    c.record('solved-1', 8, 8);
    c.record('solved-2', 8, 8);
    // Unseen, of a kind solved 16/16: 2 pseudo-attempts at q = 17/18.
    expect(c.passRate('new')).toBeCloseTo(17 / 18, 12);
    // Its own 8/8 with the other one's 8/8 as the prior: (8 + 2 · 9/10) / (8 + 2).
    expect(c.passRate('solved-1')).toBeCloseTo((8 + 2 * 0.9) / 10, 12);
    // Another difficulty or another tool is another kind: still unseen, ½.
    expect(c.passRate('harder')).toBe(0.5);
    expect(c.passRate('other')).toBe(0.5);
    expect(c.weight('new')).toBeLessThan(c.weight('other') / 2);
    // A failure of the kind lowers its unseen scenarios' rate; the kind's totals follow the decayed records.
    c.record('solved-1', 8, 0); // solved-1: attempts 4 + 8, successes 4 + 0
    expect(c.passRate('new')).toBeCloseTo((2 * ((8 + 4 + 1) / (8 + 12 + 2))) / 2, 12);
    // A resumed run (the saved records, the same scenarios) rebuilds the kinds' totals.
    const resumed = new Curriculum(set, CurriculumStateSchema.parse(JSON.parse(JSON.stringify(c.state()))));
    for (const s of set) expect(resumed.passRate(s.id)).toBeCloseTo(c.passRate(s.id), 12);
    expect(() => new Curriculum(set, {}, { priorWeight: 0 })).toThrow(/priorWeight/);
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
