/**
 * The table the README shows for `npm run demo -- --seeds 1,2,3`: per seed and as a mean over seeds, validation
 * and test success before and after training, the share of groups dropped because every attempt scored alike,
 * and the wall time. Everything is read from the runs' own files (metrics.jsonl, state.json).
 *
 *   node --import tsx scripts/demo-table.ts runs/demo-seed1-… runs/demo-seed2-… [--markdown]
 *
 * prints the seeds table, each run's test table per kind and, for several runs, their mean per kind (the table
 * docs/training.md shows), so that runs made by separate commands give the table one `--seeds` run prints.
 */
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { McpTrajectory } from '../src/agent/trajectory.js';
import { isSuccess } from '../src/eval/evaluate.js';
import { readScenarios } from '../src/scenarios/scenario.js';
import { kindBreakdown, type KindRow, type Outcome } from '../src/train/breakdown.js';
import { RunDir } from '../src/train/run-dir.js';

export interface SeedRow {
  run: string;
  seed: number;
  valBefore: number;
  valBest: number;
  bestStep: number;
  lastStep: number;
  /** Null when the run has no test set. */
  testBefore: number | null;
  testBest: number | null;
  testLast: number | null;
  /** Groups dropped for zero reward variance / groups, over all training steps. */
  zeroVarianceShare: number;
  /** Seconds: measured by the caller when given, else the sum of the run's phase timings. */
  wallS: number;
}

/** One row of the table from a finished run's folder. */
export async function seedRow(dir: string, measuredWallS?: number): Promise<SeedRow> {
  const run = new RunDir(dir);
  const state = await run.readState();
  if (!state) throw new Error(`${dir}: no state.json (the run never completed step 0)`);
  const config = await run.readConfig<{ seed: number }>();
  const metrics = await run.readMetrics(state.step);
  const at = (step: number) => metrics.find((m) => m.step === step) ?? {};
  const num = (x: unknown) => (typeof x === 'number' ? x : null);
  const last = at(state.step);
  const steps = metrics.filter((m) => m.step !== 0);
  const groups = steps.reduce((a, m) => a + (num(m.groups) ?? 0), 0);
  const dropped = steps.reduce((a, m) => a + (num(m.groups_dropped_zero_variance) ?? 0), 0);
  const phases = metrics.reduce((a, m) => a + Object.values((m.wall_s ?? {}) as Record<string, number>).reduce((x, y) => x + y, 0), 0);
  return {
    run: dir, seed: config.seed, valBefore: num(at(0).val_success) ?? NaN, valBest: state.bestValSuccess, bestStep: state.bestStep, lastStep: state.step,
    testBefore: num(at(0).test_success), testBest: num(last.test_success_best), testLast: num(last.test_success),
    zeroVarianceShare: groups > 0 ? dropped / groups : 0, wallS: measuredWallS ?? phases,
  };
}

const pct = (x: number | null) => (x === null || Number.isNaN(x) ? '–' : `${(x * 100).toFixed(1)}%`);
const pts = (a: number | null, b: number | null) => (a === null || b === null ? '–' : `${(b - a) * 100 >= 0 ? '+' : ''}${((b - a) * 100).toFixed(1)}`);
const time = (s: number) => {
  const whole = Math.round(s); // round once, so that 659.7 s reads 11 min 00 s, not 10 min 60 s
  return `${Math.floor(whole / 60)} min ${String(whole % 60).padStart(2, '0')} s`;
};

/** The table as Markdown (what the README holds) or as aligned plain text. */
export function formatSeedTable(rows: SeedRow[], markdown = true): string {
  const head = ['seed', 'val untrained', 'val best (step)', 'test untrained', 'test best', 'test gain', 'test last (step)', 'last − best', 'zero-variance groups', 'wall time'];
  const line = (r: SeedRow | null, label: string, xs: SeedRow[]): string[] => {
    const mean = (f: (r: SeedRow) => number | null) => {
      const v = xs.map(f);
      return v.some((x) => x === null) ? null : (v as number[]).reduce((a, b) => a + b, 0) / v.length;
    };
    const m = (f: (r: SeedRow) => number | null) => (r ? f(r) : mean(f));
    return [
      label, pct(m((x) => x.valBefore)), `${pct(m((x) => x.valBest))}${r ? ` (${r.bestStep})` : ''}`,
      pct(m((x) => x.testBefore)), pct(m((x) => x.testBest)), pts(m((x) => x.testBefore), m((x) => x.testBest)),
      `${pct(m((x) => x.testLast))}${r ? ` (${r.lastStep})` : ''}`, pts(m((x) => x.testBest), m((x) => x.testLast)),
      pct(m((x) => x.zeroVarianceShare)), time(m((x) => x.wallS) ?? 0),
    ];
  };
  const body = rows.map((r) => line(r, String(r.seed), [r]));
  if (rows.length > 1) body.push(line(null, 'mean', rows));
  if (markdown) {
    return [head, head.map(() => '---'), ...body].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
  }
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  return [head, ...body].map((cells) => cells.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n');
}

/** Test success per kind of task (tool shape × difficulty): the untrained model and the checkpoint validation selected. */
export interface KindTable {
  /** The run folder (a mean over runs: theirs, joined by ", "). */
  run: string;
  /** Null for a mean over runs whose selected steps differ. */
  bestStep: number | null;
  /** success[0]: untrained (step 0), success[1]: the selected checkpoint (best step). */
  rows: KindRow[];
}

/**
 * The kind table of a finished run, from its own files: the test set it copied (scenarios/test.jsonl) and the test
 * trajectories of step 0 and of the selected step. Null when the run has no test set or has not finished.
 */
export async function kindTable(dir: string): Promise<KindTable | null> {
  const run = new RunDir(dir);
  const state = await run.readState();
  const testFile = run.path('scenarios', 'test.jsonl');
  if (!state?.stopped || !existsSync(testFile)) return null;
  const outcomes = async (step: number): Promise<Outcome[]> => {
    const file = run.testTrajectories(step);
    if (!existsSync(file)) return [];
    return (await readFile(file, 'utf8')).split('\n').filter((l) => l.trim() !== '').map((l) => {
      const t = JSON.parse(l) as McpTrajectory;
      return { scenario_id: t.scenario_id, success: isSuccess(t) };
    });
  };
  return { run: dir, bestStep: state.bestStep, rows: kindBreakdown(await readScenarios(testFile), [await outcomes(0), await outcomes(state.bestStep)]) };
}

/**
 * The mean of several runs' kind tables on the same test set (the demo's seeds): per kind, the mean of the runs'
 * success rates that exist. Kinds are matched by tool shape and difficulty.
 */
export function meanKindTable(tables: readonly KindTable[]): KindTable {
  const rows = new Map<string, KindRow & { sums: { total: number; n: number }[] }>();
  for (const t of tables) {
    for (const r of t.rows) {
      const key = `${r.surface} @${r.difficulty}`;
      if (!rows.has(key)) rows.set(key, { ...r, success: [], sums: r.success.map(() => ({ total: 0, n: 0 })) });
      r.success.forEach((x, i) => {
        if (x === null) return;
        rows.get(key)!.sums[i].total += x;
        rows.get(key)!.sums[i].n += 1;
      });
    }
  }
  const steps = new Set(tables.map((t) => t.bestStep));
  return {
    run: tables.map((t) => t.run).join(', '),
    bestStep: steps.size === 1 ? tables[0].bestStep : null,
    rows: [...rows.values()]
      .sort((a, b) => a.surface.localeCompare(b.surface) || a.difficulty - b.difficulty)
      .map(({ surface, difficulty, scenarios, sums }) => ({ surface, difficulty, scenarios, success: sums.map((x) => (x.n > 0 ? x.total / x.n : null)) })),
  };
}

/** The kind table as Markdown or aligned plain text, with an overall row (every test attempt). */
export function formatKindTable(t: KindTable, markdown = true): string {
  const head = ['tool shape', 'difficulty', 'test tasks', 'untrained', t.bestStep === null ? 'selected' : `selected (step ${t.bestStep})`, 'gain'];
  const body = t.rows.map((r) => [r.surface, String(r.difficulty), String(r.scenarios), pct(r.success[0]), pct(r.success[1]), pts(r.success[0], r.success[1])]);
  // Overall: weighted by scenarios, as the run's own test success is (one attempt per scenario by default).
  const overall = (i: number) => {
    const known = t.rows.filter((r) => r.success[i] !== null);
    const n = known.reduce((a, r) => a + r.scenarios, 0);
    return n > 0 ? known.reduce((a, r) => a + r.scenarios * r.success[i]!, 0) / n : null;
  };
  body.push(['all', '', String(t.rows.reduce((a, r) => a + r.scenarios, 0)), pct(overall(0)), pct(overall(1)), pts(overall(0), overall(1))]);
  if (markdown) return [head, head.map(() => '---'), ...body].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  return [head, ...body].map((cells) => cells.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n');
}

/** What the script prints for these run folders: the seeds table, each run's per-kind table, and their mean per kind. */
export async function formatRunTables(dirs: readonly string[], markdown: boolean): Promise<string> {
  const rows = await Promise.all(dirs.map((d) => seedRow(d)));
  const out = [formatSeedTable(rows, markdown)];
  const kinds: KindTable[] = [];
  for (const d of dirs) {
    const t = await kindTable(d);
    if (!t) continue;
    out.push(`\nTest success per kind, ${d}:\n${formatKindTable(t, markdown)}`);
    kinds.push(t);
  }
  if (kinds.length > 1) out.push(`\nTest success per kind, mean of ${kinds.length} runs:\n${formatKindTable(meanKindTable(kinds), markdown)}`);
  return out.join('\n');
}

// Run as a script (not imported): compared by name too, since a bundle of the demo (scripts/device-e2e.sh) shares
// this module's import.meta.url with its entry point.
if (import.meta.url === pathToFileURL(process.argv[1]).href && /demo-table\.[jt]s$/.test(process.argv[1])) {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { markdown: { type: 'boolean', default: false } } });
  if (positionals.length === 0) {
    console.error('usage: demo-table.ts RUN_DIR... [--markdown]');
    process.exit(1);
  }
  console.log(await formatRunTables(positionals, values.markdown));
}
