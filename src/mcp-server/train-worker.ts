/**
 * The background training process start_training spawns. It reads its job from `<run>/job-config.json` and its
 * target from standard input, and calls runTrainJob — the function `mcprl train` calls — directly: no command line
 * is rebuilt and nothing is parsed twice.
 *
 *   node train-worker.js <run>/job-config.json   < {"mcpServers": {"target": {…}}}
 *
 * The target comes on standard input because its header and environment values are secrets: they never appear
 * on a command line, in the run folder or in the log. Progress goes to `<run>/progress.jsonl` (what training_status
 * reads) and, as plain lines for people, to stderr (the run's train.log); a failure is recorded in both.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { targetFromConfig } from '../mcp/config.js';
import { TrainJobSchema } from '../mcp-rl/job.js';
import { runTrainJob } from '../mcp-rl/train.js';
import { ProgressLog } from '../train/progress-log.js';
import { RunDir } from '../train/run-dir.js';
import type { DirLock } from '../util/dir-lock.js';
import { terminalBars } from '../util/progress.js';

const jobFile = path.resolve(process.argv[2] ?? '');
const run = new RunDir(path.dirname(jobFile));
const progress = new ProgressLog(run.dir, [terminalBars()]);
let lock: DirLock | undefined;
try {
  // First of all, so that from here on the run's lock says this worker is training it (training_status reads it).
  lock = await run.lock();
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  const target = targetFromConfig(JSON.parse(Buffer.concat(chunks).toString('utf8')), path.join(process.cwd(), 'stdin'), 'target');
  const job = TrainJobSchema.parse(JSON.parse(await readFile(jobFile, 'utf8')));
  const { result, adapter } = await runTrainJob({ run, job, target, progress });
  process.stderr.write(`validation success ${(result.valBefore * 100).toFixed(1)}% → ${(result.valBest * 100).toFixed(1)}% (best step ${result.bestStep}, stopped: ${result.state.stopped}); ${adapter ? `adapter ${adapter}` : 'no adapter beat the untrained model'}\n`);
} catch (err) {
  const code = (err as { code?: unknown }).code;
  const msg = err instanceof Error ? err.message : String(err);
  const line = `${typeof code === 'string' && !msg.startsWith(code) ? `${code}: ` : ''}${msg}`.replace(/\s+/g, ' ').trim();
  progress.failed(line);
  process.stderr.write(`mcprl train: ${line}\n`);
  process.exitCode = 1;
} finally {
  lock?.release();
}
