import { describe, expect, it } from 'vitest';
import type { BarStream } from '../util/progress.js';
import { downloadProgress } from './model-option.js';

/** A stream that keeps what is written; isTTY and columns as a terminal (or a file) reports them. */
function capture(tty: { columns: number } | null): { stream: BarStream; text: () => string } {
  const out: string[] = [];
  const stream: BarStream = { isTTY: tty !== null, ...(tty ? { columns: tty.columns } : {}), write: (s: string | Uint8Array) => out.push(String(s)) > 0 };
  return { stream, text: () => out.join('') };
}

/** A download as src/hf/hub.ts reports it: at the start, every few MiB, and when complete. */
const MB = 1_000_000;
const download = [
  { repo: 'org/m', file: 'config.json', done: 0, total: 500 },
  { repo: 'org/m', file: 'config.json', done: 500, total: 500 },
  { repo: 'org/m', file: 'model.safetensors', done: 1 * MB, total: 4 * MB },
  { repo: 'org/m', file: 'model.safetensors', done: 2 * MB, total: 4 * MB },
  { repo: 'org/m', file: 'model.safetensors', done: 4 * MB, total: 4 * MB },
];

describe('downloadProgress', () => {
  it('writes a line as each file starts into a file or a pipe, saying where a resumed one resumes', () => {
    const { stream, text } = capture(null);
    const report = downloadProgress('mcprl serve', stream);
    for (const p of download) report(p);
    expect(text()).toBe('mcprl serve: downloading org/m/config.json (0.5 kB)\nmcprl serve: downloading org/m/model.safetensors (4.0 MB, resuming at 1.0 MB)\n');
  });

  it("draws a bar per file on a terminal, as the run's bars are drawn: as wide as the terminal less one, ending each file's line", () => {
    const { stream, text } = capture({ columns: 120 });
    const report = downloadProgress('mcprl serve', stream);
    for (const p of download) report(p);
    const frames = text().split('\r').slice(1);
    expect(frames).toHaveLength(download.length);
    for (const f of frames) expect(f.replace(/\n$/, '')).toHaveLength(119);
    expect(frames[3]).toMatch(/^mcprl serve: downloading org\/m\/model\.safetensors \[#+\.+\] 2\.0 MB of 4\.0 MB 50% +$/);
    expect(frames.filter((f) => f.endsWith('\n'))).toHaveLength(2);
  });
});
