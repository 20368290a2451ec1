/**
 * The background training process start_training spawns: `mcprl train` with the target read from standard input.
 *
 * The target arrives as an `mcpServers` config on stdin (Node gives a child a socket, not a pipe, so the train
 * command cannot read /dev/stdin itself). It is written to a private temporary file (0600 in a 0700 folder) only
 * for the moment the command reads it, then removed: header and environment values of the target never appear
 * on a command line, in the run directory or in the log.
 *
 *   node train-child.js <mcprl train options…>   < {"mcpServers": {"target": {…}}}
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { main } from '../cli/main.js';

const chunks: Buffer[] = [];
for await (const c of process.stdin) chunks.push(c as Buffer);
const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-target-'));
const file = path.join(dir, 'target.json');
try {
  writeFileSync(file, Buffer.concat(chunks), { mode: 0o600 });
  const done = main([process.argv[0], 'mcprl', 'train', ...process.argv.slice(2), '--config', file, '--server', 'target']);
  // commander runs the action synchronously up to its first await, and the action reads --config before that;
  // should this ever change, the run fails at once with "cannot read config file" instead of leaving it behind.
  rmSync(dir, { recursive: true, force: true });
  await done;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
