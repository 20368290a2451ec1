/**
 * Preloaded into a `mcprl` child (`node --import tsx --import test/faults/kill-at.ts …`) by the kill fault tests:
 * the process signals itself at an exact point of its writes, so that no timer decides where the kill lands.
 * MCPRL_KILL_AT is `<before|after>:[<op>:]<path suffix>[#n]`: just before or just after the n-th (default first)
 * `op` onto a path ending with the suffix. `op` is `rename` (the default: the moment a file or folder is committed,
 * as src/util/atomic.ts writes every file and folder by rename) or `writeFile`. MCPRL_KILL_SIGNAL names the signal
 * (default SIGKILL); one the process handles (SIGTERM) is handled as it would be from outside, while the write
 * waits forever.
 */
import fsp from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';

const spec = process.env.MCPRL_KILL_AT;
if (spec) {
  const m = /^(before|after):(?:(rename|writeFile):)?(.+?)(?:#(\d+))?$/.exec(spec);
  if (!m) throw new Error(`MCPRL_KILL_AT: expected <before|after>:[rename:|writeFile:]<path suffix>[#n], got ${spec}`);
  const [, when, op = 'rename', suffix, nth] = m;
  const signal = (process.env.MCPRL_KILL_SIGNAL ?? 'SIGKILL') as NodeJS.Signals;
  let seen = 0;
  const die = (): Promise<never> => {
    process.kill(process.pid, signal);
    // The write never completes. A handled signal arrives on a later turn of the event loop, which this interval
    // keeps running (else Node would exit at once, its top-level await unsettled); it decides nothing.
    setInterval(() => undefined, 60_000);
    return new Promise<never>(() => undefined);
  };
  const hit = (to: unknown) => String(to).endsWith(suffix) && ++seen === Number(nth ?? 1);
  if (op === 'rename') {
    const rename = fsp.rename;
    fsp.rename = async (from, to) => {
      const h = hit(to);
      if (h && when === 'before') await die();
      await rename(from, to);
      if (h && when === 'after') await die();
    };
  } else {
    const writeFile = fsp.writeFile;
    type Args = Parameters<typeof writeFile>;
    fsp.writeFile = async (file: Args[0], data: Args[1], options?: Args[2]) => {
      const h = hit(file);
      if (h && when === 'before') await die();
      await writeFile(file, data, options);
      if (h && when === 'after') await die();
    };
  }
  syncBuiltinESMExports();
}
