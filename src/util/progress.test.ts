import { describe, expect, it } from 'vitest';
import { terminalBars, type BarStream, type ProgressEvent, type ProgressPhase } from './progress.js';

/** A stream that keeps what is written; isTTY and columns as a terminal (or a file) reports them. */
function capture(tty: { columns: number } | null): { stream: BarStream; text: () => string } {
  const out: string[] = [];
  const stream: BarStream = { isTTY: tty !== null, ...(tty ? { columns: tty.columns } : {}), write: (s: string | Uint8Array) => out.push(String(s)) > 0 };
  return { stream, text: () => out.join('') };
}

/** The events of one training step as the loop emits them: each phase from 0 to its total, one unit at a time,
 *  each unit 100 ms after the last (by the events' own times, not the clock). */
function step(step: number, start: number): ProgressEvent[] {
  const events: ProgressEvent[] = [];
  let time = start;
  const phase = (phase: ProgressPhase, total: number) => {
    for (let done = 0; done <= total; done++) events.push({ phase, step, done, total, time: (time += 100) });
  };
  phase('gather', 16);
  phase('score', 4);
  phase('train', 6);
  events.push({ phase: 'checkpoint', step, done: 0, total: 0, time });
  phase('validate', 8);
  return events;
}

describe('terminalBars into a file or a pipe', () => {
  it('writes one line per phase when it ends, with its step, units and duration', () => {
    const { stream, text } = capture(null);
    const bars = terminalBars(stream);
    bars({ phase: 'starting', step: 0, done: 0, total: 0, message: 'device cpu', time: 0 });
    for (const e of [...step(1, 0), ...step(2, 10_000)]) bars(e);
    expect(text().split('\n')).toEqual([
      'device cpu',
      'step 1 gather: 16 rollouts in 1.6 s',
      'step 1 score: 4 groups in 0.4 s',
      'step 1 train: 6 sequences in 0.6 s',
      'step 1 validate: 8 rollouts in 0.8 s',
      'step 2 gather: 16 rollouts in 1.6 s',
      'step 2 score: 4 groups in 0.4 s',
      'step 2 train: 6 sequences in 0.6 s',
      'step 2 validate: 8 rollouts in 0.8 s',
      '',
    ]);
    expect(text()).not.toContain('\r');
  });

  it('writes a phase run again for the same step (a regathered round) again, and a repeated last event once', () => {
    const { stream, text } = capture(null);
    const bars = terminalBars(stream);
    const ev = (done: number, time: number): ProgressEvent => ({ phase: 'gather', step: 3, done, total: 4, time });
    for (const [d, t] of [[0, 0], [4, 500], [4, 600], [0, 1000], [2, 1200], [4, 3000]]) bars(ev(d, t));
    expect(text()).toBe('step 3 gather: 4 rollouts in 0.5 s\nstep 3 gather: 4 rollouts in 2.0 s\n');
  });

  it('shows a scenario set\'s check only once it has run for a second, by the events\' own times', () => {
    const { stream, text } = capture(null);
    const ev = (done: number, total: number, time: number): ProgressEvent => ({ phase: 'check_scenarios', step: 0, done, total, time });
    const small = terminalBars(stream);
    for (const [d, t] of [[0, 5], [24, 7], [36, 9]]) small(ev(d, 36, t));
    expect(text()).toBe('');
    const big = terminalBars(stream);
    for (const [d, t] of [[0, 0], [200_000, 400], [600_000, 1200], [1_000_000, 2000]]) big(ev(d, 1_000_000, t));
    expect(text()).toBe('check_scenarios: 1000000 scenarios in 2.0 s\n');
  });
});

describe('terminalBars on a terminal', () => {
  it('redraws a bar in place, as wide as the terminal less one column, and ends its line when the phase ends', () => {
    const { stream, text } = capture({ columns: 100 });
    const bars = terminalBars(stream);
    for (const e of step(1, 0)) bars(e);
    const frames = text().split('\r').slice(1);
    // One frame per event of the four counted phases (checkpoint has no units).
    expect(frames).toHaveLength(17 + 5 + 7 + 9);
    for (const f of frames) expect(f.replace(/\n$/, '')).toHaveLength(99);
    expect(frames[0]).toMatch(/^step 1 gather +\[\.{24}\] 0\/16 rollouts 0\.0s +$/);
    expect(frames[8]).toMatch(/^step 1 gather +\[#{12}\.{12}\] 8\/16 rollouts 0\.8s +$/);
    expect(frames[16]).toMatch(/^step 1 gather +\[#{24}\] 16\/16 rollouts 1\.6s +\n$/);
    expect(frames.filter((f) => f.endsWith('\n'))).toHaveLength(4);
  });

  it('draws a shorter bar on a narrow terminal, and none where there is no room, never wrapping the line', () => {
    const narrow = capture({ columns: 50 });
    terminalBars(narrow.stream)({ phase: 'gather', step: 12, done: 3, total: 64, time: 0 });
    expect(narrow.text()).toMatch(/^\rstep 12 gather +\[#?\.+\] 3\/64 rollouts 0\.0s *$/);
    expect(narrow.text()).toHaveLength(1 + 49);
    const tiny = capture({ columns: 30 });
    terminalBars(tiny.stream)({ phase: 'validate', step: 12, done: 3, total: 64, time: 0 });
    expect(tiny.text()).not.toContain('[');
    expect(tiny.text()).toHaveLength(1 + 29);
  });
});
