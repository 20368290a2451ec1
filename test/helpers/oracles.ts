/**
 * The Python oracles of the test suite: PyTorch (model logits, LoRA gradients, optimiser steps), onnx (its
 * model checker) and jinja2 (an independent renderer of chat templates), all run by one interpreter.
 *
 * A missing oracle must never pass unnoticed: a CI run whose Debian install half-failed would otherwise be
 * green having compared nothing. So where oracles are required (CI=true, or MCPRL_REQUIRE_ORACLES=1) a test
 * that needs a missing one fails; elsewhere it is skipped with the reason as its note, so the summary counts
 * it and the reporter shows why. `npm run setup` installs every oracle.
 */
import { spawnSync } from 'node:child_process';

export type Oracle = 'torch' | 'onnx' | 'jinja2';

/** The interpreter every oracle runs in: MCPRL_PYTHON, default /usr/bin/python3 (where Debian's packages land). */
export const PYTHON = process.env.MCPRL_PYTHON || '/usr/bin/python3';

const DEBIAN_PACKAGE: Record<Oracle, string> = { torch: 'python3-torch', onnx: 'python3-onnx', jinja2: 'python3-jinja2' };

/** True when a missing oracle is a failure: under CI (CI=true or 1) or with MCPRL_REQUIRE_ORACLES=1. */
export function oraclesRequired(env: NodeJS.ProcessEnv = process.env): boolean {
  const ci = (env.CI ?? '').toLowerCase();
  return ci === 'true' || ci === '1' || env.MCPRL_REQUIRE_ORACLES === '1';
}

const probed = new Map<Oracle, string | null>();

/** Null when PYTHON can import the oracle's module, else why not. Probed once per test file. */
export function oracleMissing(oracle: Oracle): string | null {
  if (!probed.has(oracle)) {
    const r = spawnSync(PYTHON, ['-c', `import ${oracle}`], { encoding: 'utf8' });
    const why = r.error
      ? `${PYTHON} does not run (${r.error.message})`
      : r.status !== 0
        ? `${PYTHON} cannot import ${oracle} (${r.stderr.trim().split('\n').pop()})`
        : null;
    probed.set(oracle, why && `${why}; install Debian's ${DEBIAN_PACKAGE[oracle]} (npm run setup installs every oracle)`);
  }
  return probed.get(oracle)!;
}

/** Thrown where a required oracle is missing. */
export class OracleMissingError extends Error {
  constructor(oracle: Oracle, why: string) {
    super(`the ${oracle} oracle is required here (CI=true or MCPRL_REQUIRE_ORACLES=1) but ${why}`);
    this.name = 'OracleMissingError';
  }
}

/** The part of vitest's test context this needs (its `skip` records the note as the skip's reason). */
interface SkippableContext {
  skip(note?: string): never;
}

const warned = new Set<Oracle>();

/**
 * Call at the top of a test (with its context) or in a hook (without) that needs `oracle`.
 * Returns true when the oracle is usable. When it is missing: throws OracleMissingError where oracles are
 * required; otherwise warns once per file and skips the test with the reason (given a context) or returns
 * false (so a hook can leave its reference work undone; the tests that need it skip themselves).
 */
export function requireOracle(oracle: Oracle, ctx?: SkippableContext): boolean {
  const why = oracleMissing(oracle);
  if (why === null) return true;
  if (oraclesRequired()) throw new OracleMissingError(oracle, why);
  if (!warned.has(oracle)) {
    warned.add(oracle);
    console.warn(`SKIPPING the ${oracle} oracle's tests: ${why}`);
  }
  if (ctx) ctx.skip(`${oracle} oracle missing: ${why}`);
  return false;
}
