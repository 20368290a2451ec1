/**
 * A curriculum over the training scenarios: each step's scenarios are drawn by their recent pass rate,
 * preferring those the model sometimes solves. A scenario the model always fails or always solves gives a group
 * whose rewards are all alike, which carries no GRPO signal; one it solves about half the time gives the most.
 *
 * Each scenario keeps a decayed count of its attempts and successes (halved each time it is gathered again, so
 * the rate follows the model as it learns). Scenarios of one kind — the same checked tools in the same order and
 * the same difficulty (scenarioSurface) — tend to be solved alike, so the kind's record lends a scenario a prior:
 * q = (successes + 1) / (attempts + 2) over the kind's other scenarios, and the scenario's pass rate is
 * p = (successes + m q) / (attempts + m), m = `priorWeight` pseudo-attempts. An unseen scenario of a kind the model
 * always solves (or always fails) is then weighed as such before its first group, where without the prior every
 * unseen scenario counts as p = ½; a scenario alone of its kind has p = (successes + 1) / (attempts + 2) for m = 2.
 * Its weight is `floor + (p (1 − p))^k`, k = `power`: (¼)^k + floor at p = ½, falling towards `floor` for scenarios
 * always failed or always solved, which are still revisited now and then.
 *
 * A scenario whose last `retireAfter` groups each scored all alike, or whose last group was solved by every attempt,
 * is retired: it weighs only `floor` until a draw of it by that floor gives a group whose scores differ. A scenario
 * solved by a whole group is learnt, and a revisit would only check that it stays so; a group all failed, or all at
 * one partial reward, may be an unlucky draw of a scenario the model is learning, so it retires after `retireAfter`
 * (retiring those after one alike group as well left the mean test gain of the demo 0.7 points lower, within one
 * test task). A full group all alike is strong evidence that the next one will be too, stronger than the smoothed
 * pass rate makes of it: a scenario solved 8 of 8 times in a kind solved 90 % of the time has p = 0.98 and still
 * weighs 0.025, a tenth of one at p = ½, and once the model solves most of its tasks there are tens of them.
 * Rewards all at the same partial score are invisible to a pass rate altogether. In the demo without retirement
 * (seeds 1–3), 18 % of the groups were revisits of a scenario whose last group had scored all alike, and 71 % of
 * those scored all alike again. The draw still fills the batch: when few scenarios are left active, retired ones
 * make up the rest.
 *
 * Scenarios are drawn without replacement with probability in proportion to their weight (Efraimidis–Spirakis keys
 * u^(1/w)), from a seeded generator, so a resumed run draws the same.
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
