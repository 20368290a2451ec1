/**
 * A run's progress events (see src/util/progress.ts), kept as JSON lines in `<run>/progress.jsonl` for whoever
 * watches the run from another process (training_status), and handed to listeners (terminal bars) in this one.
 *
 * The file is appended to, one line per event, and stays bounded: past MAX_BYTES it is renamed to
 * progress.1.jsonl (replacing the previous one) and a new file starts. Only the newest event matters to readers.
 */
import { appendFileSync, existsSync, renameSync, statSync } from 'node:fs';
import { WriteError } from '../util/atomic.js';
import { open } from 'node:fs/promises';
import path from 'node:path';
import { ProgressEventSchema, type ProgressEvent, type ProgressListener, type ProgressPhase } from '../util/progress.js';

const MAX_BYTES = 1 << 20;
const TAIL_BYTES = 4096;

export const PROGRESS_FILE = 'progress.jsonl';
const PREVIOUS_FILE = 'progress.1.jsonl';

/** A phase of one step in flight: report how many of its units are done. */
export interface PhaseProgress {
  update(done: number): void;
}

export class ProgressLog {
  private readonly file: string;
  private bytes: number;
  /** The step of the newest event (what a failure is reported against). */
  private step = 0;

  /** Events go to `<runDir>/progress.jsonl` once that folder exists (before, only to the listeners). */
  constructor(
    private readonly runDir: string,
    private readonly listeners: ProgressListener[] = [],
  ) {
    this.file = path.join(runDir, PROGRESS_FILE);
    this.bytes = existsSync(this.file) ? statSync(this.file).size : 0;
  }

  emit(phase: ProgressPhase, step: number, done = 0, total = 0, message?: string): void {
    this.step = step;
    const event: ProgressEvent = { phase, step, done, total, ...(message !== undefined ? { message } : {}), time: Date.now() };
    this.append(JSON.stringify(event) + '\n');
    for (const l of this.listeners) l(event);
  }

  /** The job ended with an error: `message` says why, on one line. */
  failed(message: string): void {
    try {
      this.emit('failed', this.step, 0, 0, message.replace(/\s+/g, ' ').trim());
    } catch {
      // Recording a failure must not replace it (on a full disk, the record itself cannot be written).
    }
  }

  /** Starts a phase of `total` units (an event with done = 0 at once, so watchers see the phase begin). */
  phase(phase: ProgressPhase, step: number, total: number): PhaseProgress {
    this.emit(phase, step, 0, total);
    return { update: (done) => this.emit(phase, step, done, total) };
  }

  private append(line: string): void {
    if (!existsSync(this.runDir)) return;
    const bytes = Buffer.byteLength(line);
    if (this.bytes + bytes > MAX_BYTES && this.bytes > 0) {
      renameSync(this.file, path.join(this.runDir, PREVIOUS_FILE));
      this.bytes = 0;
    }
    try {
      appendFileSync(this.file, line);
    } catch (e) {
      throw new WriteError(this.file, e);
    }
    this.bytes += bytes;
  }
}

/** The newest progress event of a run, or null when it has none. */
export async function readLatestProgress(runDir: string): Promise<ProgressEvent | null> {
  for (const name of [PROGRESS_FILE, PREVIOUS_FILE]) {
    const event = await lastEvent(path.join(runDir, name));
    if (event) return event;
  }
  return null;
}

async function lastEvent(file: string): Promise<ProgressEvent | null> {
  if (!existsSync(file)) return null;
  const fh = await open(file, 'r');
  try {
    const { size } = await fh.stat();
    const length = Math.min(size, TAIL_BYTES);
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, size - length);
    const lines = buf.toString('utf8').split('\n');
    // The last line may be half written, and the first one cut by the tail: take the newest that parses.
    for (let i = lines.length - 1; i >= 0; i--) {
      try {
        const parsed = ProgressEventSchema.safeParse(JSON.parse(lines[i]));
        if (parsed.success) return parsed.data;
      } catch {
        // Not a whole line.
      }
    }
    return null;
  } finally {
    await fh.close();
  }
}
