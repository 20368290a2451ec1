/**
 * Child process of bench/kv-budget.bench.ts: loads the model folder argv[2] with a KV cache budget of argv[3] MiB,
 * then runs a training step's gather on it: argv[4] groups of argv[5] rollouts, all in flight at once, each one turn
 * of a prompt of argv[6] tokens (shared within its group, as a group's first prompt is) and argv[7] generated
 * tokens. Prints {"maxRssMiB", "peakKvBytes", "peakSlots", "seconds"} on stdout. A process of its own so that its
 * peak RSS (VmHWM, which starts afresh at exec) is this gather's alone.
 */
import { readFileSync } from 'node:fs';
import { Model } from '../src/engine/model.js';

const [dir, kvMib, groupsArg, perGroupArg, promptArg, tokensArg] = process.argv.slice(2);
const [groups, perGroup, promptLen, maxTokens] = [groupsArg, perGroupArg, promptArg, tokensArg].map(Number);
const model = await Model.load(dir, { kvCacheMib: Number(kvMib) });
const t0 = performance.now();
const runs: Promise<unknown>[] = [];
for (let g = 0; g < groups; g++) {
  const prompt = Array.from({ length: promptLen }, (_, i) => 1000 + ((g * 7919 + i * 104729) % 100_000));
  for (let r = 0; r < perGroup; r++) runs.push(model.generate({ promptIds: prompt, sampling: { maxTokens, temperature: 1, seed: g * perGroup + r } }));
}
await Promise.all(runs);
const seconds = (performance.now() - t0) / 1000;
const kv = model.kvCacheStats();
model.close();
const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
if (!hwm) throw new Error('no VmHWM in /proc/self/status');
process.stdout.write(`${JSON.stringify({ maxRssMiB: Number(hwm[1]) / 1024, peakKvBytes: kv.peakBytes, peakSlots: kv.peakSlots, seconds })}\n`);
