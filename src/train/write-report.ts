/**
 * Writes a run's report.html (and, at the end of training, exports its best adapter) from the run directory
 * alone, so `mcprl report <run>` can regenerate it at any time, also for a run that was interrupted.
 */
import { existsSync } from 'node:fs';
import { copyFile, mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Trajectory } from '../agent/trajectory.js';
import { writeFileAtomic } from '../util/atomic.js';
import { renderReport, type ReportTrajectory } from './report.js';
import type { RunDir } from './run-dir.js';

async function readTrajectories(file: string): Promise<ReportTrajectory[]> {
  if (!existsSync(file)) return [];
  return (await readFile(file, 'utf8'))
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Trajectory)
    .map((t) => ({ scenario_id: t.scenario_id, task: t.messages.find((m) => m.role === 'user')?.content ?? undefined, reward: t.reward, messages: t.messages }));
}

/** Copies the best checkpoint's PEFT files (not the optimiser state) to `<run>/adapter`; null when step 0 was best. */
export async function exportBestAdapter(run: RunDir, bestStep: number): Promise<string | null> {
  if (bestStep === 0) return null;
  const from = run.checkpoint(bestStep);
  const to = run.path('adapter');
  await rm(to, { recursive: true, force: true });
  await mkdir(to, { recursive: true });
  for (const f of ['adapter_config.json', 'adapter_model.safetensors']) await copyFile(join(from, f), join(to, f));
  return to;
}

export async function writeRunReport(run: RunDir, opts: { exportBest?: boolean } = {}): Promise<{ report: string; adapter: string | null }> {
  const state = await run.readState();
  const metrics = await run.readMetrics(state?.step ?? Infinity);
  const bestStep = state?.bestStep ?? 0;
  const adapter = opts.exportBest && state ? await exportBestAdapter(run, bestStep) : existsSync(run.path('adapter')) ? run.path('adapter') : null;
  const config = existsSync(run.path('config.json')) ? await run.readConfig<Record<string, unknown>>() : {};
  const html = renderReport({
    runName: run.name,
    config,
    metrics,
    before: await readTrajectories(run.valTrajectories(0)),
    after: await readTrajectories(run.valTrajectories(bestStep)),
    summary: state
      ? [
          `Steps completed: ${state.step}${state.stopped ? ` (stopped: ${state.stopped})` : ''}. ` +
            `Validation success: ${pct(metrics.find((m) => m.step === 0)?.val_success)} untrained → ${pct(state.bestValSuccess)} at the best step (${bestStep}).`,
          adapter ? `Best adapter (PEFT): ${adapter}` : 'No adapter beat the untrained model.',
        ]
      : ['The run has not completed its first evaluation yet.'],
  });
  const report = run.path('report.html');
  await writeFileAtomic(report, html);
  return { report, adapter };
}

const pct = (x: unknown) => (typeof x === 'number' ? `${(x * 100).toFixed(1)}%` : '–');
