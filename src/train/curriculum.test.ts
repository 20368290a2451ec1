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

  it('retires a scenario after groups in a row all scored alike, until one of its groups scores differently', () => {
    // Each alone of its kind. Solved 8 of 8 (all alike) and solved 7 of 8: close pass rates, yet only the first is retired.
    const set = [scenario('solved', 1), scenario('seven', 2), scenario('partial', 3)];
    const c = new Curriculum(set, {}, { retireAfter: 1 });
    c.record('solved', 8, 8, true);
    c.record('seven', 8, 7);
    // Every attempt at the same partial reward: no success, so the pass rate alone would weigh it as one always failed.
    c.record('partial', 8, 0, true);
    expect(c.retired('solved')).toBe(true);
    expect(c.retired('partial')).toBe(true);
    expect(c.retired('seven')).toBe(false);
    expect(c.weight('solved')).toBe(0.005);
    expect(c.weight('partial')).toBe(0.005);
    // p = (7 + 2 × ½) / 10 = 0.8: 0.005 + 0.16, against 0.005 + 0.0099 for 8 of 8 were it not retired.
    expect(c.weight('seven')).toBeCloseTo(0.005 + 0.16, 12);
    // The draw still fills the batch: the one active scenario first, then retired ones.
    expect(c.pick(1, createRng(3)).map((s) => s.id)).toEqual(['seven']);
    expect(c.pick(3, createRng(3)).map((s) => s.id).sort()).toEqual(['partial', 'seven', 'solved']);
    // A group whose scores differ brings it back at its pass rate; the streak is saved with the run's state.
    c.record('solved', 8, 6, false);
    expect(c.retired('solved')).toBe(false);
    expect(c.weight('solved')).toBeCloseTo(0.005 + c.passRate('solved') * (1 - c.passRate('solved')), 12);
    const saved = CurriculumStateSchema.parse(JSON.parse(JSON.stringify(c.state())));
    expect(saved.partial).toEqual({ attempts: 8, successes: 0, alike: 1 });
    expect(saved.solved).toEqual({ attempts: 12, successes: 10 });
    expect(new Curriculum(set, saved, { retireAfter: 1 }).retired('partial')).toBe(true);
  });

  it('retires after retireAfter alike groups in a row, or at once after one all solved, and never when it is 0', () => {
    const two = new Curriculum([scenario('failed', 1), scenario('solved', 2)], {}, { retireAfter: 2 });
    two.record('failed', 8, 0, true);
    expect(two.retired('failed')).toBe(false);
    two.record('failed', 8, 0, true);
    expect(two.retired('failed')).toBe(true);
    // Solved by the whole group: learnt, retired at once; saved with the run's state, and undone by a group that differs.
    two.record('solved', 8, 8, true);
    expect(two.retired('solved')).toBe(true);
    const saved = CurriculumStateSchema.parse(JSON.parse(JSON.stringify(two.state())));
    expect(saved.solved).toEqual({ attempts: 8, successes: 8, alike: 1, solved: true });
    expect(new Curriculum([scenario('failed', 1), scenario('solved', 2)], saved, { retireAfter: 2 }).retired('solved')).toBe(true);
    two.record('solved', 8, 5, false);
    expect(two.retired('solved')).toBe(false);
    const never = new Curriculum([scenario('a')], {}, { retireAfter: 0 });
    never.record('a', 8, 8, true);
    never.record('a', 8, 8, true);
    expect(never.retired('a')).toBe(false);
    expect(never.weight('a')).toBeGreaterThan(0.005);
    expect(() => new Curriculum([], {}, { retireAfter: 1.5 })).toThrow(/retireAfter/);
  });
});
