import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ProgressEvent } from '../util/progress.js';
import { ProgressLog, readLatestProgress } from './progress-log.js';

let dir: string;
afterEach(() => rmSync(dir, { recursive: true, force: true }));
const fresh = () => (dir = mkdtempSync(path.join(tmpdir(), 'mcprl-progress-')));
const lines = (file: string) => readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as ProgressEvent);

describe('ProgressLog', () => {
  it('appends every event to progress.jsonl and hands it to the listeners; the newest is read back', async () => {
    fresh();
    const seen: ProgressEvent[] = [];
    const log = new ProgressLog(dir, [(e) => seen.push(e)]);
    const gather = log.phase('gather', 1, 4);
    gather.update(1);
    gather.update(4);
    log.phase('score', 1, 2).update(1);
    const written = lines(path.join(dir, 'progress.jsonl'));
    expect(written.map(({ phase, step, done, total }) => [phase, step, done, total])).toEqual([
      ['gather', 1, 0, 4], ['gather', 1, 1, 4], ['gather', 1, 4, 4], ['score', 1, 0, 2], ['score', 1, 1, 2],
    ]);
    expect(seen).toEqual(written);
    expect(await readLatestProgress(dir)).toEqual(written[4]);
  });

  it('records a failure on one line against the last step', async () => {
    fresh();
    const log = new ProgressLog(dir);
    log.emit('train', 3, 1, 2);
    log.failed('engine ran\nout of memory');
    expect(await readLatestProgress(dir)).toMatchObject({ phase: 'failed', step: 3, message: 'engine ran out of memory' });
  });

  it('writes nothing before the run folder exists, and reads null from a run without events', async () => {
    fresh();
    const run = path.join(dir, 'not-yet');
    let heard = 0;
    new ProgressLog(run, [() => heard++]).emit('starting', 0);
    expect(heard).toBe(1);
    expect(await readLatestProgress(run)).toBeNull();
  });

  it('skips a half-written last line', async () => {
    fresh();
    new ProgressLog(dir).emit('validate', 2, 5, 9);
    writeFileSync(path.join(dir, 'progress.jsonl'), readFileSync(path.join(dir, 'progress.jsonl'), 'utf8') + '{"phase":"valid', { flag: 'w' });
    expect(await readLatestProgress(dir)).toMatchObject({ phase: 'validate', done: 5 });
  });

  it('stays bounded: past 1 MiB the file moves to progress.1.jsonl and a new one starts', async () => {
    fresh();
    const log = new ProgressLog(dir);
    const bar = log.phase('gather', 1, 100_000);
    for (let i = 1; i <= 20_000; i++) bar.update(i);
    const size = statSync(path.join(dir, 'progress.jsonl')).size;
    expect(size).toBeLessThanOrEqual(1 << 20);
    expect(statSync(path.join(dir, 'progress.1.jsonl')).size).toBeGreaterThan((1 << 20) - 200);
    expect(await readLatestProgress(dir)).toMatchObject({ phase: 'gather', done: 20_000 });
  });
});
