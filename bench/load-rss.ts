/**
 * Child process of bench/memory.bench.ts: loads the model folder argv[2] with weightDtype argv[3] ('none': load
 * nothing, the baseline of Node + the addon), scores one short sequence (so the run state exists too, as in
 * serving), and prints {"maxRssMiB", "weightBytes"} on stdout. A process of its own, so its peak RSS is this
 * load's alone. The peak is /proc/self/status VmHWM, which starts afresh at exec; getrusage's ru_maxrss would not
 * (Linux carries the forking parent's peak into it).
 */
import { readFileSync } from 'node:fs';
import { Model, WeightDtypeSchema } from '../src/engine/model.js';
import { loadNative } from '../src/engine/native.js';

const [dir, dtype] = process.argv.slice(2);
let weightBytes = null;
loadNative();
if (dtype !== 'none') {
  const model = await Model.load(dir, { weightDtype: WeightDtypeSchema.parse(dtype) });
  await model.score([Array.from({ length: 16 }, (_, i) => i + 1)], { adapter: null });
  weightBytes = model.weightBytes();
  model.close();
}
const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
if (!hwm) throw new Error('no VmHWM in /proc/self/status');
process.stdout.write(`${JSON.stringify({ maxRssMiB: Number(hwm[1]) / 1024, weightBytes })}\n`);
