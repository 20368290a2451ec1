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

/** The phases drawn as bars, and what one unit of each is. */
const UNITS: Partial<Record<ProgressPhase, string>> = {
  read_scenarios: 'lines', check_scenarios: 'scenarios', write_scenarios: 'scenarios',
  gather: 'rollouts', score: 'groups', train: 'sequences', validate: 'rollouts', test: 'rollouts',
};
/** Phases that take milliseconds on a usual set: shown only once one has run for a second (by event time). */
const QUICK = new Set<ProgressPhase>(['read_scenarios', 'check_scenarios', 'write_scenarios']);
/** The widest bar drawn, in characters; a narrower terminal gets a shorter one. */
const BAR_WIDTH = 24;

/** Where bars go: process.stderr, or anything that writes and says whether it is a terminal (and how wide). */
export type BarStream = Pick<NodeJS.WriteStream, 'write'> & { isTTY?: boolean; columns?: number };

/** One update of something in progress, as a person is shown it. */
export interface ProgressLine {
  /** What is in progress: `step 3 gather`, `mcprl serve: downloading Qwen/Qwen3-4B/model.safetensors`. */
  label: string;
  /** Units done, of total; a bar is drawn when total is known (above 0), and the line ends when done reaches it. */
  done: number;
  total: number;
  /** The figures after the bar: `3/64 rollouts 0.4s`, `1.2 MB of 3.7 MB 32%`. */
  figures: string;
  /** The line this update writes into a file or a pipe, when it is a milestone there (a phase ended, a file began). */
  milestone?: string;
}

/**
 * The one way progress is drawn for a person. On a terminal, each update redraws its line in place (as wide as the
 * terminal, a bar where there is room) and the line ends when done reaches total. Into a file or a pipe, where
 * redraws would be one line each, only milestones are written, a line each.
 */
export function progressLines(stream: BarStream = process.stderr): (line: ProgressLine) => void {
  return ({ label, done, total, figures, milestone }) => {
    if (!stream.isTTY) {
      if (milestone !== undefined) stream.write(`${milestone}\n`);
      return;
    }
    // One character short of the terminal's width: a line that fills it wraps on some terminals, and then \r
    // no longer returns to the line's start.
    const cols = Math.max(20, (stream.columns ?? 80) - 1);
    const room = total > 0 ? Math.min(BAR_WIDTH, cols - Math.max(16, label.length) - figures.length - 4) : 0;
    const filled = room >= 5 ? Math.round(Math.min(1, done / total) * room) : 0;
    const bar = room >= 5 ? ` [${'#'.repeat(filled)}${'.'.repeat(room - filled)}]` : '';
    stream.write(`\r${`${label.padEnd(16)}${bar} ${figures}`.slice(0, cols).padEnd(cols)}${total > 0 && done >= total ? '\n' : ''}`);
  };
}

/**
 * Renders a run's events for a person (progressLines): a bar per phase, or in a file or a pipe one line per phase
 * when it ends: `step 3 gather: 64 rollouts in 4.2 s` (the figures of each step are the training loop's own line).
 * A quick phase (reading and checking a scenario set) shows only once it has taken a second, so a set of a few
 * dozen scenarios draws nothing.
 */
export function terminalBars(stream: BarStream = process.stderr): ProgressListener {
  /** When each phase of each step began, and whether its end was shown; a phase run again for a step (a
   *  regathered round) starts over with its first event below total. */
  const phases = new Map<string, { started: number; ended: boolean }>();
  const draw = progressLines(stream);
  return (e) => {
    if (e.phase === 'starting' && e.message) stream.write(`${e.message}\n`);
    const unit = UNITS[e.phase];
    if (unit === undefined || e.total <= 0) return;
    const key = `${e.phase}:${e.step}`;
    let p = phases.get(key);
    if (!p || (p.ended && e.done < e.total)) phases.set(key, (p = { started: e.time, ended: false }));
    if (p.ended) return;
    const ended = e.done >= e.total;
    p.ended = ended;
    const secs = (e.time - p.started) / 1000;
    if (QUICK.has(e.phase) && secs < 1) return;
    // Scenario phases run before step 0 and are not a step's work.
    const label = QUICK.has(e.phase) ? e.phase : `step ${e.step} ${e.phase}`;
    draw({
      label,
      done: e.done,
      total: e.total,
      figures: `${e.done}/${e.total} ${unit} ${secs.toFixed(1)}s`,
      milestone: ended ? `${label}: ${e.total} ${unit} in ${secs.toFixed(1)} s` : undefined,
    });
  };
}
