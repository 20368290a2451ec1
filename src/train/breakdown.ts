/**
 * Success broken down by the part of the server a scenario exercises (its checked tools, in order) and by its
 * difficulty, so that a report shows where a model gained or lost, not only by how much.
 */
import type { Scenario } from '../scenarios/scenario.js';

/** The checked tools of a scenario in order: "get_book", or "get_book → convert_price" for a chain. */
export function scenarioSurface(s: Pick<Scenario, 'checks'>): string {
  const tools = (s.checks ?? []).flatMap((c) => (c.kind === 'tool_called' ? [c.tool] : []));
  return tools.length > 0 ? tools.join(' → ') : '(no tool check)';
}

/** A scenario's kind: its checked tools in order and its difficulty ("get_book → convert_price @2"). */
export function scenarioKind(s: Pick<Scenario, 'checks' | 'difficulty'>): string {
  return `${scenarioSurface(s)} @${s.difficulty}`;
}

/** One attempt's outcome at one scenario. */
export interface Outcome {
  scenario_id: string;
  success: boolean;
}

export interface BreakdownRow {
  by: 'tool' | 'difficulty';
  key: string;
  /** Scenarios in this row. */
  scenarios: number;
  /** Success rate per column (null: the column has no attempt at these scenarios). */
  success: (number | null)[];
}

/** Rows by tool (sorted by name), then by difficulty (ascending), each with one success rate per column. */
export function successBreakdown(scenarios: readonly Scenario[], columns: readonly (readonly Outcome[])[]): BreakdownRow[] {
  const rows: BreakdownRow[] = [];
  const add = (by: BreakdownRow['by'], keyOf: (s: Scenario) => string, order: (a: string, b: string) => number) => {
    const groups = new Map<string, Set<string>>();
    for (const s of scenarios) {
      const k = keyOf(s);
      if (!groups.has(k)) groups.set(k, new Set());
      groups.get(k)!.add(s.id);
    }
    for (const key of [...groups.keys()].sort(order)) {
      const ids = groups.get(key)!;
      const success = columns.map((col) => {
        const hits = col.filter((o) => ids.has(o.scenario_id));
        return hits.length > 0 ? hits.filter((o) => o.success).length / hits.length : null;
      });
      rows.push({ by, key, scenarios: ids.size, success });
    }
  };
  add('tool', scenarioSurface, (a, b) => a.localeCompare(b));
  add('difficulty', (s) => String(s.difficulty), (a, b) => Number(a) - Number(b));
  return rows;
}

export interface KindRow {
  /** The checked tools in order (scenarioSurface). */
  surface: string;
  difficulty: number;
  /** Scenarios of this kind. */
  scenarios: number;
  /** Success rate per column (null: the column has no attempt at these scenarios). */
  success: (number | null)[];
}

/** Rows per kind (tool shape × difficulty), by surface then difficulty, each with one success rate per column. */
export function kindBreakdown(scenarios: readonly Scenario[], columns: readonly (readonly Outcome[])[]): KindRow[] {
  const groups = new Map<string, { surface: string; difficulty: number; ids: Set<string> }>();
  for (const s of scenarios) {
    const k = scenarioKind(s);
    if (!groups.has(k)) groups.set(k, { surface: scenarioSurface(s), difficulty: s.difficulty, ids: new Set() });
    groups.get(k)!.ids.add(s.id);
  }
  return [...groups.values()]
    .sort((a, b) => a.surface.localeCompare(b.surface) || a.difficulty - b.difficulty)
    .map(({ surface, difficulty, ids }) => ({
      surface, difficulty, scenarios: ids.size,
      success: columns.map((col) => {
        const hits = col.filter((o) => ids.has(o.scenario_id));
        return hits.length > 0 ? hits.filter((o) => o.success).length / hits.length : null;
      }),
    }));
}
