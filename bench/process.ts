/**
 * What the benches that start `mcprl serve` or `mcprl backend` as a child process share: a free port, waiting for
 * /health, and reading the child's memory from /proc (Linux).
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** A port nothing listens on now (the child binds it a moment later). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** Resolves once the server on `port` answers /health, polling every 200 ms for at most 120 s. */
export async function healthy(port: number): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.ok, () => false)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the server on port ${port} did not become healthy within 120 s`);
}

/** A memory figure of process `pid` in MiB: VmRSS (resident now) or VmHWM (its peak). */
export function procStatusMiB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no ${field} for pid ${pid}`);
  return Number(m[1]) / 1024;
}
