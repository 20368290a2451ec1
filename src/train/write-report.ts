/**
 * Writes a run's report.html (and, at the end of training, exports its best adapter) from the run directory
 * alone, so `mcprl report <run>` can regenerate it at any time, also for a run that was interrupted.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { isSuccess } from '../eval/evaluate.js';
import { copyPeftAdapter } from '../hf/peft.js';
import type { McpTrajectory } from '../agent/trajectory.js';
import { readScenarios, type Scenario } from '../scenarios/scenario.js';
import { writeFileAtomic } from '../util/atomic.js';
import { successBreakdown } from './breakdown.js';
import { renderReport, type ReportInput, type ReportTrajectory } from './report.js';
import type { RunDir } from './run-dir.js';

async function readTrajectories(file: string): Promise<(ReportTrajectory & { success: boolean })[]> {
  if (!existsSync(file)) return [];
  return (await readFile(file, 'utf8'))
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as McpTrajectory)
    .map((t) => ({ scenario_id: t.scenario_id, task: t.messages.find((m) => m.role === 'user')?.content ?? undefined, reward: t.reward, messages: t.messages, success: isSuccess(t) }));
}

/** Success by tool and difficulty on the validation set (untrained, best) and the test set (untrained, best, last). */
async function breakdowns(run: RunDir, bestStep: number, lastStep: number, testDone: boolean): Promise<NonNullable<ReportInput['breakdowns']>> {
  const read = async (set: 'val' | 'test'): Promise<Scenario[]> => {
    const file = run.path('scenarios', `${set}.jsonl`);
    return existsSync(file) ? readScenarios(file) : [];
  };
  const out: NonNullable<ReportInput['breakdowns']> = [];
  const val = await read('val');
  if (val.length > 0) {
    const cols = [await readTrajectories(run.valTrajectories(0)), await readTrajectories(run.valTrajectories(bestStep))];
    out.push({ title: `Validation (${val.length} scenarios; selects the checkpoint)`, columns: ['untrained', `best (step ${bestStep})`], rows: successBreakdown(val, cols) });
  }
  const test = await read('test');
  if (test.length > 0 && testDone) {
    const cols = [await readTrajectories(run.testTrajectories(0)), await readTrajectories(run.testTrajectories(bestStep)), await readTrajectories(run.testTrajectories(lastStep))];
    out.push({ title: `Test (${test.length} scenarios; never used for a decision)`, columns: ['untrained', `best (step ${bestStep})`, `last (step ${lastStep})`], rows: successBreakdown(test, cols) });
  }
  return out;
}

/** Copies the best checkpoint's PEFT files (not the optimiser state) to `<run>/adapter`; null when step 0 was best. */
export async function exportBestAdapter(run: RunDir, bestStep: number): Promise<string | null> {
  if (bestStep === 0) return null;
  const from = run.checkpoint(bestStep);
  const to = run.path('adapter');
  await rm(to, { recursive: true, force: true });
  await mkdir(to, { recursive: true });
  await copyPeftAdapter(from, to);
  return to;
}

export async function writeRunReport(run: RunDir, opts: { exportBest?: boolean } = {}): Promise<{ report: string; adapter: string | null }> {
  const state = await run.readState();
  const metrics = await run.readMetrics(state?.step ?? Infinity);
  const bestStep = state?.bestStep ?? 0;
  const adapter = opts.exportBest && state ? await exportBestAdapter(run, bestStep) : existsSync(run.path('adapter')) ? run.path('adapter') : null;
  const config = existsSync(run.path('config.json')) ? await run.readConfig<Record<string, unknown>>() : {};
  const last = metrics.find((m) => m.step === state?.step);
  const testDone = !!state?.stopped && typeof last?.test_success === 'number';
  const html = renderReport({
    runName: run.name,
    config,
    metrics,
    before: await readTrajectories(run.valTrajectories(0)),
    after: await readTrajectories(run.valTrajectories(bestStep)),
    ...(state ? { selectedStep: bestStep } : {}),
    summary: state
      ? [
          `Steps completed: ${state.step}${state.stopped ? ` (stopped: ${state.stopped})` : ''}. ` +
            `Validation success: ${pct(metrics.find((m) => m.step === 0)?.val_success)} untrained → ${pct(state.bestValSuccess)} at the best step (${bestStep}).`,
          ...(testDone
            ? [`Test success (held out from every decision): ${pct(metrics.find((m) => m.step === 0)?.test_success)} untrained → ${pct(last!.test_success_best)} at the best step (${bestStep}); ${pct(last!.test_success)} at the last step (${state.step}).`]
            : []),
          adapter ? `Best adapter (PEFT): ${adapter}` : 'No adapter beat the untrained model.',
        ]
      : ['The run has not completed its first evaluation yet.'],
    breakdowns: state ? await breakdowns(run, bestStep, state.step, testDone) : [],
  });
  const report = run.path('report.html');
  await writeFileAtomic(report, html);
  return { report, adapter };
}

const pct = (x: unknown) => (typeof x === 'number' ? `${(x * 100).toFixed(1)}%` : '–');
