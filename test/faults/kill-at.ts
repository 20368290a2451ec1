/**
 * Preloaded into a `mcprl` child (`node --import tsx --import test/faults/kill-at.ts …`) by the kill -9 fault
 * tests: the process SIGKILLs itself at an exact point of its crash-safe writes, so that no timer decides where the
 * kill lands. MCPRL_KILL_AT is `<before|after>:<path suffix>[#n]`: just before or just after the n-th (default
 * first) rename onto a path ending with the suffix, i.e. the moment that file or folder is committed
 * (src/util/atomic.ts writes every file and folder by rename).
 */
import fsp from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';

const spec = process.env.MCPRL_KILL_AT;
if (spec) {
  const m = /^(before|after):(.+?)(?:#(\d+))?$/.exec(spec);
  if (!m) throw new Error(`MCPRL_KILL_AT: expected <before|after>:<path suffix>[#n], got ${spec}`);
  const [, when, suffix, nth] = m;
  let seen = 0;
  const rename = fsp.rename;
  const die = (): Promise<never> => {
    process.kill(process.pid, 'SIGKILL');
    return new Promise<never>(() => undefined);
  };
  fsp.rename = async (from, to) => {
    const hit = String(to).endsWith(suffix) && ++seen === Number(nth ?? 1);
    if (hit && when === 'before') await die();
    await rename(from, to);
    if (hit && when === 'after') await die();
  };
  syncBuiltinESMExports();
}
