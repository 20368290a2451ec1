/** A run's status as the run tools (training_status, stop_training, list_runs) return it: its schema and one line. */
import { z } from 'zod';
import { RunPhaseSchema, type RunStatus } from '../training-jobs.js';

export const RunStatusOutput = {
  run: z.string(),
  status: z.enum(['starting', 'running', 'finished', 'stopped', 'failed', 'incomplete']),
  phase: RunPhaseSchema,
  step: z.number().int().nullable(),
  max_steps: z.number().int().nullable(),
  best_step: z.number().int().nullable(),
  best_val_success: z.number().nullable(),
  val_success_before: z.number().nullable(),
  stopped_reason: z.string().nullable(),
  latest_metrics: z.record(z.string(), z.unknown()).nullable(),
  activity: z.string().nullable(),
  progress: z
    .object({ phase: z.string(), step: z.number().int(), done: z.number().int(), total: z.number().int() })
    .nullable()
    .describe("The run's newest progress event while it runs: phase, the step in flight, done of total units"),
  adapter: z.string().nullable(),
  report: z.string().nullable(),
  error: z.string().nullable(),
  started_at: z.string().nullable(),
  ended_at: z.string().nullable(),
};

/** The status in one line, for clients that show only text. */
export function statusLine(s: RunStatus): string {
  const pct = (x: number | null) => (x === null ? '–' : `${(x * 100).toFixed(1)}%`);
  return `run ${s.run}: ${s.status}${s.status === 'running' ? ` (${s.phase})` : ''}, step ${s.step ?? '–'}/${s.max_steps ?? '–'}, ` +
    `validation success ${pct(s.val_success_before)} → best ${pct(s.best_val_success)} (step ${s.best_step ?? '–'})${s.error ? `; ${s.error}` : ''}`;
}
