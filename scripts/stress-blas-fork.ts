/**
 * Stress reproduction of the OpenBLAS fork hang (native/kernels/gemm.cc, `BlasForkGuard`): OpenBLAS sgemms run on a worker
 * thread (the engine's AsyncWorker, as training runs) while the JavaScript thread spawns processes (as a trainer
 * with asynchronous rollouts spawns MCP servers). Each trial is a child process that reports its progress over IPC;
 * a trial that makes no progress for `--stall-s` seconds is counted as hung and killed (SIGKILL). This is a
 * stress tool, not a test: whether a given trial hits the race depends on timing.
 *
 *   node --import tsx scripts/stress-blas-fork.ts [--trials 10] [--seconds 20] [--stall-s 10] [--n 256] [--addon FILE]
 *
 * `--addon` loads another build of the test addon, whose gemmBench it runs (e.g. a copy of
 * build/Release/mcprl_native_test.node made before a change), so that two builds can be compared in one sitting.
 * Prints one JSON line per trial and a summary line:
 * {trials, hung, forks, sgemms}; the stall clock starts once the child has loaded the addon.
 */
import { fork, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({
  options: {
    trials: { type: 'string', default: '10' },
    seconds: { type: 'string', default: '20' },
    'stall-s': { type: 'string', default: '10' },
    n: { type: 'string', default: '256' },
    addon: { type: 'string' },
    child: { type: 'boolean', default: false },
  },
});
const seconds = Number(a.seconds), n = Number(a.n);

if (a.child) {
  // One trial: the worker thread multiplies with OpenBLAS (all cores) while this thread forks and execs /bin/true.
  const { loadNativeTesting } = await import('../src/engine/native-testing.js');
  let native = loadNativeTesting();
  // loadNativeTesting has set OpenBLAS's environment (OPENBLAS_THREAD_TIMEOUT) for this process; the other build gets the same.
  if (a.addon) native = createRequire(import.meta.url)(resolve(a.addon)) as typeof native;
  if (!native.info().openblas) throw new Error('stress-blas-fork: this build of the addon has no OpenBLAS');
  const end = Date.now() + seconds * 1000;
  let forks = 0, sgemms = 0;
  const report = () => process.send!({ forks, sgemms });
  report();
  const multiply = (async () => {
    while (Date.now() < end) {
      await native.gemmBench(n, 'blas', 4, 0);
      sgemms += 4;
      report();
    }
  })();
  while (Date.now() < end) {
    await new Promise<void>((done, fail) => spawn('/bin/true', { stdio: 'ignore' }).once('exit', () => done()).once('error', fail));
    forks++;
    report();
  }
  await multiply;
  report();
  process.disconnect();
} else {
  const stallMs = Number(a['stall-s']) * 1000;
  const total = { trials: Number(a.trials), hung: 0, forks: 0, sgemms: 0 };
  for (let t = 1; t <= total.trials; t++) {
    const child = fork(import.meta.filename, ['--child', '--seconds', String(seconds), '--n', String(n), ...(a.addon ? ['--addon', a.addon] : [])], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let last = { forks: 0, sgemms: 0 };
    let timer: NodeJS.Timeout | undefined;
    let hung = false;
    const stall = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        hung = true;
        child.kill('SIGKILL');
      }, stallMs);
    };
    // The first message says the addon is loaded (starting node and tsx takes long on a loaded machine).
    child.on('message', (m: { forks: number; sgemms: number }) => {
      last = m;
      stall();
    });
    const code = await new Promise<number | null>((done) => child.once('exit', (c) => done(c)));
    clearTimeout(timer);
    if (hung) total.hung++;
    total.forks += last.forks;
    total.sgemms += last.sgemms;
    console.log(JSON.stringify({ trial: t, hung, exit: code, ...last }));
  }
  console.log(JSON.stringify(total));
}
