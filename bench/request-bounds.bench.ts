/**
 * A huge request against the real servers (issue 42 §3): peak resident memory of the server process and the longest
 * `/health` answer while the request is handled.
 *  - `mcprl backend` with a registered model (the bundled tiny one): `POST /backend/train` whose `groups` are
 *    BENCH_BOUNDS_NUMBERS numbers (default 10,000,000: a 20 MB body).
 *  - `mcprl serve` on a seeded random Qwen3 folder (the real vocabulary, a 32,768-token context, so its body cap is
 *    32 MiB): `messages` of BENCH_BOUNDS_SERVE_NUMBERS numbers (default 3,500,000: 7 MB).
 * Each server is a process of its own; its peak is /proc/PID/status VmHWM (since exec, model load included, which is
 * small here; sampled every 50 ms), its memory before the request VmRSS. /health is asked in a loop, one at a time, from the moment the
 * body is sent until the answer is in. Figures: status of the answer (or 0: the server died), the answer's wall
 * time, peak RSS, RSS before, longest /health. Not a test: the figures depend on the machine.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeRandomModel } from '../scripts/random-model.js';
import { freePort, healthy, procStatusMiB } from './process.js';
import type { Emit } from './run.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const ENTRY = join(ROOT, 'src', 'cli', 'entry.ts');
const TINY = join(ROOT, 'fixtures', 'models', 'tiny-bookshop');

/** POSTs `body`; resolves with the status (0 when the connection died) once the answer is in. */
function post(port: number, path: string, body: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', () => resolve(0));
    });
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

interface Figures {
  status: number;
  seconds: number;
  peakMiB: number;
  beforeMiB: number;
  healthMaxMs: number;
}

/** Sends the huge request; meanwhile asks /health one at a time and keeps the slowest answer. */
async function huge(child: ChildProcess, port: number, path: string, body: string): Promise<Figures> {
  const pid = child.pid!;
  const beforeMiB = procStatusMiB(pid, 'VmRSS');
  let peakMiB = procStatusMiB(pid, 'VmHWM');
  // The peak is sampled from here, whatever the server is doing (it may be stuck, or die).
  const sample = () => {
    try {
      peakMiB = Math.max(peakMiB, procStatusMiB(pid, 'VmHWM'));
    } catch {
      // The process is gone; its last peak read stands.
    }
  };
  const sampler = setInterval(sample, 50);
  let done = false;
  let healthMaxMs = 0;
  const t0 = performance.now();
  const answer = post(port, path, body).then((s) => ((done = true), s));
  while (!done) {
    const h0 = performance.now();
    const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.ok, () => false);
    // A /health that fails (the server died meanwhile) counts until it failed.
    healthMaxMs = Math.max(healthMaxMs, performance.now() - h0);
    if (!ok) break;
  }
  const s = await answer;
  const seconds = (performance.now() - t0) / 1000;
  clearInterval(sampler);
  sample();
  return { status: s, seconds, peakMiB, beforeMiB, healthMaxMs };
}

function emitAll(emit: Emit, prefix: string, f: Figures): void {
  emit(`${prefix}.status`, f.status, 'http status (0: server died)');
  emit(`${prefix}.answer_time`, f.seconds, 's');
  emit(`${prefix}.peak_rss`, f.peakMiB, 'MiB');
  emit(`${prefix}.rss_before`, f.beforeMiB, 'MiB');
  emit(`${prefix}.health_max_latency`, f.healthMaxMs, 'ms');
}

function start(args: string[]): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', ENTRY, ...args], { stdio: ['ignore', 'ignore', 'ignore'] });
}

const numbers = (n: number) => `[${'1,'.repeat(n - 1)}1]`;

export default async function requestBoundsBench(emit: Emit): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mcprl-bench-bounds-'));
  try {
    // mcprl backend: a registered model, then groups of ten million numbers.
    {
      const port = await freePort();
      const child = start(['backend', '--dir', join(dir, 'store'), '--port', String(port), '--quiet']);
      try {
        await healthy(port);
        const model = { project: 'bench', name: 'bounds' };
        const reg = await post(port, '/backend/register', JSON.stringify({ settings: { ...model, baseModel: TINY } }));
        if (reg !== 200) throw new Error(`register answered ${reg}`);
        const n = Number(process.env.BENCH_BOUNDS_NUMBERS ?? 10_000_000);
        emitAll(emit, 'request_bounds.backend_train_numbers', await huge(child, port, '/backend/train', `{"model":${JSON.stringify(model)},"groups":${numbers(n)}}`));
      } finally {
        child.kill('SIGKILL');
      }
    }
    // mcprl serve: a model of a long context (a 32 MiB body cap), then 7 MB of numbers as messages.
    {
      const modelDir = join(dir, 'model');
      await makeRandomModel(modelDir, { arch: 'qwen3', dtype: 'F32', seed: 1, hiddenSize: 128, numLayers: 4, numHeads: 4, numKvHeads: 2, headDim: 32, intermediateSize: 384, maxPositionEmbeddings: 32_768 });
      const port = await freePort();
      const child = start(['serve', '--model', modelDir, '--served-model-name', 'base', '--port', String(port), '--quiet']);
      try {
        await healthy(port);
        const n = Number(process.env.BENCH_BOUNDS_SERVE_NUMBERS ?? 3_500_000);
        emitAll(emit, 'request_bounds.serve_messages_numbers', await huge(child, port, '/v1/chat/completions', `{"model":"base","messages":${numbers(n)}}`));
      } finally {
        child.kill('SIGKILL');
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
