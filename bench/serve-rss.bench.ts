/**
 * Resident memory of `mcprl serve` under disconnecting clients (issue 12 §3): a real `mcprl serve` process on a
 * seeded random Qwen3 folder (hidden 128, 4 layers, the real 151,936-token vocabulary), then rounds of 32
 * concurrent streamed completions of which half hang up after their second chunk. After each round the server's
 * VmRSS is read from /proc. Figures: RSS after the first round and after the last, and the growth per round over
 * the second half of the rounds (a least-squares slope: a server that keeps something per request grows there; one
 * that does not is flat once its allocator has warmed up). `BENCH_SERVE_ROUNDS` sets the rounds (default 20); `BENCH_VERBOSE=1` prints each round's RSS to stderr.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeRandomModel } from '../scripts/random-model.js';
import { freePort, healthy, procStatusMiB } from './process.js';
import type { Emit } from './run.js';

const ENTRY = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'cli', 'entry.ts');

/** One streamed completion; with `hangUp` the client destroys its socket after the second chunk. */
function stream(port: number, hangUp: boolean, seed: number): Promise<void> {
  const body = JSON.stringify({ model: 'base', stream: true, max_tokens: 64, temperature: 1, seed, messages: [{ role: 'user', content: `Find book bk-00${seed % 9}.` }] });
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let chunks = 0;
      res.on('data', () => {
        if (hangUp && ++chunks === 2) {
          req.destroy();
          resolve();
        }
      });
      res.on('end', () => resolve());
      res.on('error', () => resolve());
    });
    req.on('error', () => resolve());
    req.end(body);
  });
}

function slope(ys: number[]): number {
  const n = ys.length;
  const mx = (n - 1) / 2;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  ys.forEach((y, x) => {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  });
  return num / den;
}

export default async function serveRssBench(emit: Emit): Promise<void> {
  const rounds = Number(process.env.BENCH_SERVE_ROUNDS ?? 20);
  const dir = mkdtempSync(join(tmpdir(), 'mcprl-bench-serve-'));
  try {
    await makeRandomModel(dir, { arch: 'qwen3', dtype: 'F32', seed: 1, hiddenSize: 128, numLayers: 4, numHeads: 4, numKvHeads: 2, headDim: 32, intermediateSize: 384 });
    const port = await freePort();
    const child = spawn(process.execPath, ['--import', 'tsx', ENTRY, 'serve', '--model', dir, '--served-model-name', 'base', '--port', String(port), '--quiet'], { stdio: ['ignore', 'ignore', 'inherit'] });
    try {
      await healthy(port);
      const rss: number[] = [];
      for (let r = 0; r < rounds; r++) {
        await Promise.all(Array.from({ length: 32 }, (_, i) => stream(port, i % 2 === 0, r * 100 + i)));
        // The server frees a hung-up stream's KV slot on its engine queue; one more answered request drains it.
        await fetch(`http://127.0.0.1:${port}/health`);
        rss.push(procStatusMiB(child.pid!, 'VmRSS'));
        if (process.env.BENCH_VERBOSE) process.stderr.write(`round ${r + 1}: ${rss[r].toFixed(1)} MiB\n`);
      }
      emit('serve_rss.after_round_1', rss[0], 'MiB');
      emit(`serve_rss.after_round_${rounds}`, rss[rounds - 1], 'MiB');
      emit('serve_rss.growth_per_round.second_half', slope(rss.slice(Math.floor(rounds / 2))), 'MiB/round');
    } finally {
      child.kill('SIGTERM');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
