/**
 * Runs test/oracles/torch_ref.py (Debian's python3-torch as /usr/bin/python3) for engine tests.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PYTHON = '/usr/bin/python3';

/** Null when /usr/bin/python3 can import torch, else the reason (tests skip with it). */
export function torchUnavailable(): string | null {
  const r = spawnSync(PYTHON, ['-c', 'import torch'], { encoding: 'utf8' });
  if (r.error) return `${PYTHON} not runnable: ${r.error.message}`;
  if (r.status !== 0) return `${PYTHON} cannot import torch (install Debian's python3-torch): ${r.stderr.trim().split('\n').pop()}`;
  return null;
}

export interface TorchJob {
  model: string;
  adapter: string | null;
  sequences: number[][];
}

/** Per-token logprobs of each job's sequences from the PyTorch reference (float64). */
export function torchLogprobs(jobs: TorchJob[], workDir: string): number[][][] {
  const req = join(workDir, `torch-request-${process.pid}-${Date.now()}.json`);
  writeFileSync(req, JSON.stringify({ jobs }));
  const script = fileURLToPath(new URL('./torch_ref.py', import.meta.url));
  const r = spawnSync(PYTHON, [script, req], { encoding: 'utf8', maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`torch_ref.py failed: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { results: { logprobs: number[][] }[] }).results.map((x) => x.logprobs);
}
