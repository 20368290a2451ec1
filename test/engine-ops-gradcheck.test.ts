/**
 * Every native op's backward against central finite differences (native/gradcheck.cc), and both GEMM
 * kernels against a plain JavaScript matrix product.
 *
 * Gradcheck: L = sum(out * w) for a random upstream w; numeric dL/dx = (L(x + h) - L(x - h)) / 2h with
 * step h = 1e-2 on f32 forwards (L accumulated in f64), at up to 64 entries per input.
 * Tolerance: |analytic - numeric| <= 1e-3 * max(1, max |numeric|) per input (observed errors are ~1e-5..2e-4:
 * f32 rounding / h plus the O(h^2) truncation of the central difference).
 */
import { spawnSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { loadNative } from '../src/engine/native.js';

const addon = loadNative();
const OPS = ['rmsnorm', 'qknorm', 'rope', 'attention', 'attention_long', 'swiglu', 'linear', 'lora', 'lm_head', 'lm_head_sampler'];
const EXPECTED_INPUTS: Record<string, string[]> = {
  rmsnorm: ['dx', 'dw'],
  qknorm: ['dx', 'dw'],
  rope: ['dx'],
  attention: ['dq', 'dk', 'dv'],
  attention_long: ['g1 D128', 'g2 D8', 'g4 D64'].flatMap((c) => [`dq ${c}`, `dk ${c}`, `dv ${c}`]),
  swiglu: ['dgate', 'dup'],
  linear: ['dx'],
  lora: ['dx', 'dA', 'dB'],
  lm_head: ['dh'],
  lm_head_sampler: ['dh'],
};
const STEP = 1e-2;
const TOL = 1e-3;

afterAll(() => addon.setPortableGemm(false));

describe.each([
  ['portable GEMM', true],
  ['default GEMM (OpenBLAS when built with it)', false],
])('op backward vs finite differences, %s', (_name, portable) => {
  it.each(OPS)('%s', (op) => {
    addon.setPortableGemm(portable);
    for (const seed of [1, 2]) {
      const rows = addon.gradcheck(op, seed, STEP, 64);
      expect(rows.map((r) => r.input)).toEqual(EXPECTED_INPUTS[op]);
      for (const r of rows) {
        expect(r.checked).toBeGreaterThan(0);
        expect(r.maxAbsGrad).toBeGreaterThan(0.01); // the check exercises non-trivial gradients
        expect(r.maxAbsErr, `${op} ${r.input} seed ${seed}`).toBeLessThanOrEqual(TOL * Math.max(1, r.maxAbsGrad));
      }
    }
  });
});

it('gradcheck of an unknown op is a thrown JS error, not a crash', () => {
  expect(() => addon.gradcheck('nope', 1, STEP, 8)).toThrow(/unknown op 'nope'.*gradcheck\.cc:\d+/);
});

function naive(ta: boolean, tb: boolean, M: number, N: number, K: number, A: Float32Array, B: Float32Array): Float64Array {
  const C = new Float64Array(M * N);
  for (let i = 0; i < M; i++)
    for (let j = 0; j < N; j++) {
      let s = 0;
      for (let p = 0; p < K; p++) s += (ta ? A[p * M + i] : A[i * K + p]) * (tb ? B[j * K + p] : B[p * N + j]);
      C[i * N + j] = s;
    }
  return C;
}

describe('GEMM kernels vs a plain product (|diff| <= 1e-4 for entries of magnitude ~sqrt(K)/2)', () => {
  const kernels: ('portable' | 'blas')[] = addon.info().openblas ? ['portable', 'blas'] : ['portable'];
  // Sizes cover the small-M dot-product path (M <= 8), ragged 6x16 tiles and more than one K block (KC = 256).
  const sizes: [number, number, number][] = [[1, 33, 70], [5, 17, 9], [37, 29, 41], [70, 50, 300]];
  it.each(kernels)('%s', (kernel) => {
    let seed = 7;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
    for (const [M, N, K] of sizes)
      for (const ta of [false, true])
        for (const tb of [false, true]) {
          const A = Float32Array.from({ length: M * K }, rnd);
          const B = Float32Array.from({ length: K * N }, rnd);
          const C = addon.gemm(ta, tb, M, N, K, A, B, kernel);
          const ref = naive(ta, tb, M, N, K, A, B);
          let max = 0;
          for (let i = 0; i < C.length; i++) max = Math.max(max, Math.abs(C[i] - ref[i]));
          expect(max, `${kernel} ${M}x${N}x${K} ta=${ta} tb=${tb}`).toBeLessThanOrEqual(1e-4);
        }
  });
  it('MCPRL_PORTABLE_GEMM=1 forces the portable kernel from process start', () => {
    const probe = `console.log(JSON.stringify(require(${JSON.stringify(new URL('../build/Release/mcprl_native.node', import.meta.url).pathname)}).info()))`;
    const run = (env: Record<string, string>) =>
      JSON.parse(spawnSync(process.execPath, ['-e', probe], { env: { ...process.env, ...env }, encoding: 'utf8' }).stdout) as { portableGemm: boolean; openblas: boolean };
    expect(run({ MCPRL_PORTABLE_GEMM: '1' }).portableGemm).toBe(true);
    const plain = run({ MCPRL_PORTABLE_GEMM: '0' });
    expect(plain.portableGemm).toBe(!plain.openblas);
  });
  // The guard itself (native/gemm.cc, g_blas_fork): each fork passes through its atfork handlers and each OpenBLAS
  // product through its lock, as the counters show. That a fork waits for a product in flight is a matter of
  // timing, shown by scripts/stress-blas-fork.ts (and a run that forks while it trains, test/train-async-rollouts).
  it.skipIf(!addon.info().openblas)('counts every fork of the process and every OpenBLAS product (the fork guard)', () => {
    const before = addon.info();
    for (let i = 0; i < 3; i++) expect(spawnSync('/bin/true').status).toBe(0);
    addon.gemm(false, true, 64, 64, 64, new Float32Array(64 * 64), new Float32Array(64 * 64), 'blas');
    const after = addon.info();
    expect(after.forks - before.forks).toBe(3);
    expect(after.blasCalls - before.blasCalls).toBe(1);
  });
  it('reports which kernels this build has: OpenBLAS exactly where the build found it', () => {
    const info = addon.info();
    expect(info.backend).toBe('cpu');
    // The build links OpenBLAS when native/detect-blas.cjs says "yes" (a build made with MCPRL_NO_OPENBLAS=1
    // needs the same variable here, which the probe inherits).
    const detect = spawnSync(process.execPath, [new URL('../native/detect-blas.cjs', import.meta.url).pathname], { encoding: 'utf8' });
    expect(detect.stdout).toMatch(/^(yes|no)$/);
    expect(info.openblas).toBe(detect.stdout === 'yes');
  });
});
