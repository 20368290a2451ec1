/**
 * A curriculum over the training scenarios: each step's scenarios are drawn by their recent pass rate, preferring
 * those the model sometimes solves, since a group whose rewards are all alike carries no GRPO signal.
 *
 * A scenario's pass rate p is a decayed count of its attempts and successes (halved on each new gather, so it
 * follows the model as it learns), smoothed towards its kind's (scenarioSurface) with `priorWeight` pseudo-attempts,
 * so an unseen scenario of a kind always solved is weighed as such. Its weight is `floor + (p (1 − p))^power`.
 *
 * A scenario solved by a whole group, or whose last `retireAfter` groups each scored all alike, is retired to weight
 * `floor` until a draw gives it a group whose scores differ: a group all alike predicts the next one better than the
 * smoothed pass rate does, and partial rewards all alike are invisible to a pass rate. A group all failed may be an
 * unlucky draw of a scenario the model is learning, hence the `retireAfter` groups.
 *
 * Draws are without replacement, in proportion to weight (Efraimidis–Spirakis keys u^(1/w)), from a seeded
 * generator, so a resumed run draws the same.
 */
import { z } from 'zod';
import type { Scenario } from '../scenarios/scenario.js';
import type { Rng } from '../util/rng.js';
import { scenarioKind } from './breakdown.js';

export const ScenarioRecordSchema = z.object({
  /** Decayed number of rollouts of this scenario. */
  attempts: z.number().nonnegative(),
  /** Decayed number of those that succeeded. */
  successes: z.number().nonnegative(),
  /** Groups in a row, up to the latest, whose attempts all scored alike (no GRPO signal); absent means 0. */
  alike: z.number().int().nonnegative().optional(),
  /** True when the latest group was solved by every attempt; absent means false. */
  solved: z.literal(true).optional(),
});
export type ScenarioRecord = z.infer<typeof ScenarioRecordSchema>;

/** scenario id → record; saved in the run's state.json. */
export const CurriculumStateSchema = z.record(z.string(), ScenarioRecordSchema);
export type CurriculumState = z.infer<typeof CurriculumStateSchema>;

export interface CurriculumOptions {
  /** Weight every scenario has whatever its pass rate. Default 0.005 (a scenario at p = ½ weighs 0.255). */
  floor?: number;
  /** Factor applied to a scenario's counts before a new group of it is added. Default 0.5. */
  decay?: number;
  /** Pseudo-attempts (> 0) of the kind's pass rate in a scenario's own (m above). Default 2. */
  priorWeight?: number;
  /** Exponent k of the weight floor + (p (1 − p))^k. Default DEFAULT_CURRICULUM_POWER. */
  power?: number;
  /**
   * Groups in a row all scored alike after which a scenario weighs only `floor` (retired) until one of its groups
   * scores differently; one group solved by every attempt retires it at once. 0 never retires. Default
   * DEFAULT_CURRICULUM_RETIRE_AFTER.
   */
  retireAfter?: number;
}

/** The weight's exponent k when none is given (also `curriculumPower`'s default in src/train/config.ts). */
export const DEFAULT_CURRICULUM_POWER = 1;
/** Alike groups in a row that retire a scenario when none is given (also `curriculumRetireAfter`'s default). */
export const DEFAULT_CURRICULUM_RETIRE_AFTER = 0;

/** The kind a scenario's prior comes from: its checked tools in order, and its difficulty. */
const kindOf = scenarioKind;

export class Curriculum {
  private readonly records: Map<string, ScenarioRecord>;
  private readonly floor: number;
  private readonly decay: number;
  private readonly priorWeight: number;
  private readonly power: number;
  private readonly retireAfter: number;
  /** scenario id → kind, and kind → the sum of its scenarios' records. */
  private readonly kinds: Map<string, string>;
  private readonly kindTotals = new Map<string, ScenarioRecord>();

  constructor(
    readonly scenarios: readonly Scenario[],
    state: CurriculumState = {},
    opts: CurriculumOptions = {},
  ) {
    this.records = new Map(Object.entries(state).map(([id, r]) => [id, { ...r }]));
    this.floor = opts.floor ?? 0.005;
    this.decay = opts.decay ?? 0.5;
    this.priorWeight = opts.priorWeight ?? 2;
    this.power = opts.power ?? DEFAULT_CURRICULUM_POWER;
    this.retireAfter = opts.retireAfter ?? DEFAULT_CURRICULUM_RETIRE_AFTER;
    if (!(Number.isInteger(this.retireAfter) && this.retireAfter >= 0)) throw new RangeError(`curriculum retireAfter must be an integer >= 0, got ${this.retireAfter}`);
    if (!(this.priorWeight > 0)) throw new RangeError(`curriculum priorWeight must be > 0, got ${this.priorWeight}`);
    if (!(this.power > 0)) throw new RangeError(`curriculum power must be > 0, got ${this.power}`);
    this.kinds = new Map(scenarios.map((s) => [s.id, kindOf(s)]));
    for (const [id, r] of this.records) this.addToKind(id, r, 1);
  }

  /**
   * Smoothed recent pass rate of a scenario: its own record, with `priorWeight` pseudo-attempts at the pass rate of
   * its kind's other scenarios (½ when none of them was tried either).
   */
  passRate(id: string): number {
    const r = this.records.get(id) ?? { attempts: 0, successes: 0 };
    const kind = this.kindTotals.get(this.kinds.get(id) ?? '') ?? { attempts: 0, successes: 0 };
    const q = (kind.successes - r.successes + 1) / (kind.attempts - r.attempts + 2);
    return (r.successes + this.priorWeight * q) / (r.attempts + this.priorWeight);
  }

  /** Whether the scenario is retired (retireAfter ≥ 1): its last `retireAfter` groups all scored alike, or its last was all solved. */
  retired(id: string): boolean {
    const r = this.records.get(id);
    return this.retireAfter > 0 && ((r?.alike ?? 0) >= this.retireAfter || r?.solved === true);
  }

  weight(id: string): number {
    if (this.retired(id)) return this.floor;
    const p = this.passRate(id);
    return this.floor + (p * (1 - p)) ** this.power;
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

  /**
   * Adds one gathered group of a scenario: its attempts, how many of them succeeded, and whether they all scored
   * alike (the group had no GRPO signal). A group all solved and alike counts as solved.
   */
  record(id: string, attempts: number, successes: number, alike = false): void {
    const r = this.records.get(id) ?? { attempts: 0, successes: 0 };
    const streak = alike ? (r.alike ?? 0) + 1 : 0;
    const solved = alike && attempts > 0 && successes === attempts;
    const next: ScenarioRecord = {
      attempts: r.attempts * this.decay + attempts, successes: r.successes * this.decay + successes,
      ...(streak > 0 ? { alike: streak } : {}), ...(solved ? { solved: true as const } : {}),
    };
    this.addToKind(id, r, -1);
    this.addToKind(id, next, 1);
    this.records.set(id, next);
  }

  /** Adds (sign 1) or takes away (−1) a scenario's record from its kind's totals; ids of no listed scenario are ignored. */
  private addToKind(id: string, r: ScenarioRecord, sign: 1 | -1): void {
    const kind = this.kinds.get(id);
    if (kind === undefined) return;
    const t = this.kindTotals.get(kind) ?? { attempts: 0, successes: 0 };
    this.kindTotals.set(kind, { attempts: t.attempts + sign * r.attempts, successes: t.successes + sign * r.successes });
  }

  state(): CurriculumState {
    return Object.fromEntries([...this.records].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }
}
