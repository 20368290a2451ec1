/**
 * Progress as data: a run reports what it is doing as a stream of `{phase, step, done, total}` events. A terminal
 * renders them as bars (terminalBars); a run folder keeps them as JSON lines (src/train/progress-log.ts), which is
 * what `training_status` reads. Nothing parses the bars.
 */
import { z } from 'zod';

/**
 * What a run is doing. Before step 0: starting, then the scenario set's read_scenarios (lines read), check_scenarios
 * (the held-out check: scenarios indexed and checked) and write_scenarios (into the run folder: scenarios written).
 * Per step: gather (rollouts) → score (groups) → train (sequences) → checkpoint → validate (rollouts); test
 * (rollouts) at step 0 and at the last step. Around the steps: report, done, failed.
 */
export const ProgressPhaseSchema = z.enum([
  'starting', 'read_scenarios', 'check_scenarios', 'write_scenarios', 'gather', 'score', 'train', 'checkpoint', 'validate', 'test', 'report', 'done', 'failed',
]);
export type ProgressPhase = z.infer<typeof ProgressPhaseSchema>;

export const ProgressEventSchema = z.object({
  phase: ProgressPhaseSchema,
  /** The step in flight (0: validating the untrained model). */
  step: z.number().int().nonnegative(),
  /** Units of this phase done so far in this step: rollouts (gather, validate, test), groups (score), sequences (train). */
  done: z.number().int().nonnegative(),
  /** Units of this phase in this step; 0 for phases without units. */
  total: z.number().int().nonnegative(),
  /** failed: what went wrong, on one line; starting: where the engine runs and why (src/engine/device.ts). */
  message: z.string().optional(),
  /** When, in milliseconds since the epoch. */
  time: z.number(),
});
export type ProgressEvent = z.infer<typeof ProgressEventSchema>;
export type ProgressListener = (event: ProgressEvent) => void;

/** How a component that knows nothing of runs reports a long piece of work: called now and then, and at the end. */
export type OnProgress = (done: number, total: number) => void;

/** The phases drawn as bars: those that count units. */
const BAR_PHASES = new Set<ProgressPhase>(['read_scenarios', 'check_scenarios', 'write_scenarios', 'gather', 'score', 'train', 'validate', 'test']);
const UNITS: Partial<Record<ProgressPhase, string>> = { train: 'sequences', read_scenarios: 'lines', check_scenarios: 'scenarios', write_scenarios: 'scenarios' };
/** Phases that take milliseconds on a usual set: their bar appears only once one has run for a second (by event time). */
const BAR_AFTER_A_SECOND = new Set<ProgressPhase>(['read_scenarios', 'check_scenarios', 'write_scenarios']);

/**
 * Renders events as bars on `stream`: redrawn in place on a terminal, one line per 25 % otherwise (logs and CI stay
 * readable). A bar starts with the first event of its phase and step (a second later for a quick phase, so a set of
 * a few dozen scenarios draws no bar) and ends when done reaches total.
 */
export function terminalBars(stream: NodeJS.WriteStream = process.stderr): ProgressListener {
  let key = '';
  let started = 0;
  let lastQuarter = -1;
  return (e) => {
    if (e.phase === 'starting' && e.message) stream.write(`${e.message}\n`);
    if (!BAR_PHASES.has(e.phase) || e.total <= 0) return;
    if (`${e.phase}:${e.step}` !== key) {
      key = `${e.phase}:${e.step}`;
      started = e.time;
      lastQuarter = -1;
    }
    if (BAR_AFTER_A_SECOND.has(e.phase) && e.time - started < 1000) return;
    const frac = Math.min(1, e.done / e.total);
    const secs = ((e.time - started) / 1000).toFixed(1);
    const note = UNITS[e.phase] ?? '';
    if (stream.isTTY) {
      const width = 24;
      const filled = Math.round(frac * width);
      stream.write(`\r${e.phase.padEnd(9)} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${e.done}/${e.total} ${secs}s ${note}`.padEnd(90));
      if (e.done >= e.total) stream.write('\n');
      return;
    }
    const quarter = Math.floor(frac * 4);
    if (quarter > lastQuarter) {
      lastQuarter = quarter;
      stream.write(`${e.phase} ${e.done}/${e.total} (${Math.round(frac * 100)}%) ${secs}s ${note}\n`);
    }
  };
}
