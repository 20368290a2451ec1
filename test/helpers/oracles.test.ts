/**
 * The oracle guard itself: a missing oracle fails under CI=true or MCPRL_REQUIRE_ORACLES=1 and is a skip with
 * its reason elsewhere. The interpreter is a wrapper (MCPRL_PYTHON) whose PYTHONPATH shadows the oracle
 * modules, so these tests need no real oracle: `torch` raises ImportError, `jinja2` imports as an empty module.
 */
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';

const dir = mkdtempSync(join(tmpdir(), 'mcprl-oracles-'));
writeFileSync(join(dir, 'torch.py'), 'raise ImportError("torch is hidden by the test")\n');
writeFileSync(join(dir, 'jinja2.py'), '');
const wrapper = join(dir, 'python');
const real = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
writeFileSync(wrapper, `#!/bin/sh\nPYTHONPATH='${dir}' exec ${real} "$@"\n`);
chmodSync(wrapper, 0o755);

afterEach(() => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A fresh copy of the module (it reads MCPRL_PYTHON when loaded and probes once) under the given env. */
async function load(env: { CI?: string; MCPRL_REQUIRE_ORACLES?: string }, python = wrapper) {
  vi.resetModules();
  vi.stubEnv('MCPRL_PYTHON', python);
  vi.stubEnv('CI', env.CI ?? '');
  vi.stubEnv('MCPRL_REQUIRE_ORACLES', env.MCPRL_REQUIRE_ORACLES ?? '');
  return import('./oracles.js');
}

class Skipped extends Error {}
const context = () => ({ skip: vi.fn((note?: string): never => { throw new Skipped(note); }) });

describe('requireOracle', () => {
  it('fails the test where oracles are required (CI=true, CI=1, MCPRL_REQUIRE_ORACLES=1)', async () => {
    for (const env of [{ CI: 'true' }, { CI: '1' }, { MCPRL_REQUIRE_ORACLES: '1' }]) {
      const { requireOracle, OracleMissingError } = await load(env);
      const ctx = context();
      expect(() => requireOracle('torch', ctx), JSON.stringify(env)).toThrow(OracleMissingError);
      expect(() => requireOracle('torch'), JSON.stringify(env)).toThrow(/torch oracle is required.*cannot import torch.*torch is hidden by the test.*python3-torch/);
      expect(ctx.skip).not.toHaveBeenCalled();
    }
  });

  it('elsewhere skips the test with the reason as its note, and warns once', async () => {
    const { requireOracle } = await load({ CI: 'false' });
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const ctx = context();
    expect(() => requireOracle('torch', ctx)).toThrow(Skipped);
    expect(ctx.skip).toHaveBeenCalledWith(expect.stringMatching(/^torch oracle missing: .*cannot import torch/));
    // A hook gets false (and leaves its reference work undone) instead of a skip.
    expect(requireOracle('torch')).toBe(false);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0][0]).toMatch(/SKIPPING the torch oracle's tests/);
  });

  it('returns true for an oracle the interpreter imports, required or not', async () => {
    for (const env of [{ CI: 'true' }, {}]) {
      const { requireOracle } = await load(env);
      const ctx = context();
      expect(requireOracle('jinja2', ctx)).toBe(true);
      expect(ctx.skip).not.toHaveBeenCalled();
    }
  });

  it('reports an interpreter that does not run as missing', async () => {
    const { oracleMissing, PYTHON } = await load({}, join(dir, 'no-such-python'));
    expect(PYTHON).toBe(join(dir, 'no-such-python'));
    expect(oracleMissing('onnx')).toMatch(/no-such-python does not run.*python3-onnx/);
  });
});
