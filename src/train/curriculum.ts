/**
 * A curriculum over the training scenarios: each step's scenarios are drawn by their recent pass rate,
 * preferring those the model sometimes solves. A scenario the model always fails or always solves gives a group
 * whose rewards are all alike, which carries no GRPO signal; one it solves about half the time gives the most.
 *
 * Each scenario keeps a decayed count of its attempts and successes (halved each time it is gathered again, so
 * the rate follows the model as it learns). Its pass rate is the smoothed p = (successes + 1) / (attempts + 2)
 * — an unseen scenario counts as p = ½, so every scenario is tried early — and its weight is
 * `floor + p (1 − p)`: ¼ + floor at p = ½, falling towards `floor` for scenarios always failed or always solved,
 * which are still revisited now and then. Scenarios are drawn without replacement with probability in proportion
 * to their weight (Efraimidis–Spirakis keys u^(1/w)), from a seeded generator, so a resumed run draws the same.
 */
import { z } from 'zod';
import type { Scenario } from '../scenarios/scenario.js';
import type { Rng } from '../util/rng.js';

export const ScenarioRecordSchema = z.object({
  /** Decayed number of rollouts of this scenario. */
  attempts: z.number().nonnegative(),
  /** Decayed number of those that succeeded. */
  successes: z.number().nonnegative(),
});
export type ScenarioRecord = z.infer<typeof ScenarioRecordSchema>;

/** scenario id → record; saved in the run's state.json. */
export const CurriculumStateSchema = z.record(z.string(), ScenarioRecordSchema);
export type CurriculumState = z.infer<typeof CurriculumStateSchema>;

export interface CurriculumOptions {
  /** Weight every scenario has whatever its pass rate. Default 0.02 (a scenario at p = ½ weighs 0.27). */
  floor?: number;
  /** Factor applied to a scenario's counts before a new group of it is added. Default 0.5. */
  decay?: number;
}

export class Curriculum {
  private readonly records: Map<string, ScenarioRecord>;
  private readonly floor: number;
  private readonly decay: number;

  constructor(
    readonly scenarios: readonly Scenario[],
    state: CurriculumState = {},
    opts: CurriculumOptions = {},
  ) {
    this.records = new Map(Object.entries(state).map(([id, r]) => [id, { ...r }]));
    this.floor = opts.floor ?? 0.02;
    this.decay = opts.decay ?? 0.5;
  }

  /** Smoothed recent pass rate of a scenario (½ when it was never tried). */
  passRate(id: string): number {
    const r = this.records.get(id);
    return ((r?.successes ?? 0) + 1) / ((r?.attempts ?? 0) + 2);
  }

  weight(id: string): number {
    const p = this.passRate(id);
    return this.floor + p * (1 - p);
  }

  /** Draws up to n scenarios not in `exclude`, without replacement, in proportion to their weights. */
  pick(n: number, rng: Rng, exclude: ReadonlySet<string> = new Set()): Scenario[] {
    const keyed = this.scenarios
      .filter((s) => !exclude.has(s.id))
      // u^(1/w) for u uniform in (0, 1]: the n largest keys are a weighted sample without replacement.
      .map((s) => ({ s, key: Math.log(1 - rng.next()) / this.weight(s.id) }));
    keyed.sort((a, b) => b.key - a.key);
    return keyed.slice(0, n).map((k) => k.s);
  }

  /** Adds one gathered group of a scenario: its attempts and how many of them succeeded. */
  record(id: string, attempts: number, successes: number): void {
    const r = this.records.get(id) ?? { attempts: 0, successes: 0 };
    this.records.set(id, { attempts: r.attempts * this.decay + attempts, successes: r.successes * this.decay + successes });
  }

  state(): CurriculumState {
    return Object.fromEntries([...this.records].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }
}
