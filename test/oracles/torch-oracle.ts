/**
 * Runs test/oracles/torch_ref.py (Debian's python3-torch; the interpreter is test/helpers/oracles.ts's PYTHON)
 * for engine tests. Tests call requireOracle('torch') before using it.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PYTHON } from '../helpers/oracles.js';

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
