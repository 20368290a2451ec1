/**
 * Every native op's backward against central finite differences (native/testing/gradcheck.cc), and both GEMM
 * kernels against a plain JavaScript matrix product: through the test addon (src/engine/native-testing.ts), whose
 * GEMM settings are its own; the production addon's own settings are checked at the end.
 *
 * Gradcheck: L = sum(out * w) for a random upstream w; numeric dL/dx = (L(x + h) - L(x - h)) / 2h with
 * step h = 1e-2 on f32 forwards (L accumulated in f64), at up to 64 entries per input.
 * Tolerance: |analytic - numeric| <= 1e-3 * max(1, max |numeric|) per input (observed errors are ~1e-5..2e-4:
 * f32 rounding / h plus the O(h^2) truncation of the central difference).
 *
 * SwiGLU and RMSNorm also against a double-precision reference computed here (their vectorised f32 kernels:
 * native/ops/swiglu.cc, native/ops/rmsnorm.cc), with the tolerances stated at each test.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { findBuiltAddon, loadNative } from '../src/engine/native.js';
import { loadNativeTesting, type GemmKernel } from '../src/engine/native-testing.js';

const addon = loadNativeTesting();
const engineAddon = loadNative();
const OPS = ['rmsnorm', 'qknorm', 'rope', 'attention', 'attention_long', 'swiglu', 'linear', 'lora', 'lm_head', 'lm_head_sampler', 'lm_head_tiles', 'lm_head_fused'];
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
  lm_head_tiles: ['dh', 'forward vs one tile'],
  lm_head_fused: ['dh', 'fused vs two-pass', 'bf16 vs widened', 'rows alone vs together'],
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
    if (op === 'lm_head_fused' && !addon.info().gemmAvx512) {
      // The fused LM head exists only on AVX-512 CPUs (elsewhere lm_head_forward never takes it): a clear error.
      expect(() => addon.gradcheck(op, 1, STEP, 64)).toThrow(/no AVX-512/);
      return;
    }
    for (const seed of [1, 2]) {
      const rows = addon.gradcheck(op, seed, STEP, 64);
      expect(rows.map((r) => r.input)).toEqual(EXPECTED_INPUTS[op]);
      for (const r of rows) {
        expect(r.checked).toBeGreaterThan(0);
        expect(r.maxAbsGrad).toBeGreaterThan(0.01); // the check exercises non-trivial gradients
        // The tiled and the fused LM head's forward against the one-tile op: float rounding of the rescaled sums
        // and of another order of additions only; a bf16 head against its widened values, and the fused op's rows in
        // a call of their own against the same rows among others: the same arithmetic, bit for bit.
        const exact = r.input === 'bf16 vs widened' || r.input === 'rows alone vs together';
        const tol = exact ? 0 : r.input === 'forward vs one tile' || r.input === 'fused vs two-pass' ? 1e-5 : TOL;
        expect(r.maxAbsErr, `${op} ${r.input} seed ${seed}`).toBeLessThanOrEqual(tol * Math.max(1, r.maxAbsGrad));
      }
    }
  });
});

it('gradcheck of an unknown op is a thrown JS error, not a crash', () => {
  expect(() => addon.gradcheck('nope', 1, STEP, 8)).toThrow(/unknown op 'nope'.*gradcheck\.cc:\d+/);
});

describe('the production addon and the test addon (a build target of its own)', () => {
  const TEST_BINDINGS = ['gradcheck', 'gemm', 'gemmBench', 'attention', 'attentionBackward', 'attentionBench', 'swiglu', 'rmsnorm', 'lmHeadBench'];
  it('the production addon carries none of the test and bench bindings; the test addon has them all', () => {
    for (const name of TEST_BINDINGS) {
      expect(engineAddon[name], name).toBeUndefined();
      expect(typeof (addon as unknown as Record<string, unknown>)[name], name).toBe('function');
    }
  });
  it('the finite-difference checker (gradcheck.cc) is linked into the test addon only', () => {
    // Its exported symbol names (mangled, they contain gradcheck_op), present in the test addon as a control.
    const links = (file: string) => readFileSync(findBuiltAddon(file) ?? file).toString('latin1').includes('gradcheck_op');
    expect(links('mcprl_native_test.node'), 'mcprl_native_test.node links gradcheck.cc').toBe(true);
    expect(links('mcprl_native.node'), 'mcprl_native.node links gradcheck.cc').toBe(false);
  });
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
  const kernels: GemmKernel[] = addon.info().openblas ? ['portable', 'portable-avx2', 'blas'] : ['portable', 'portable-avx2'];
  // Sizes cover the small-M dot-product path (M <= 8: its 4-row x 3-column tiles with every remainder of rows and
  // columns, K below and above a multiple of 8), ragged 6x16 tiles and more than one K block (KC = 256).
  const sizes: [number, number, number][] = [[1, 33, 70], [2, 7, 8], [3, 31, 20], [5, 17, 9], [8, 10, 5], [37, 29, 41], [70, 50, 300]];
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
  it('x W^T of at most 8 rows: each row bit for bit the same whatever the rows beside it (the dot path)', () => {
    let seed = 11;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
    const [N, K] = [29, 45];
    const A = Float32Array.from({ length: 8 * K }, rnd);
    const B = Float32Array.from({ length: N * K }, rnd);
    const all = addon.gemm(false, true, 8, N, K, A, B, 'auto');
    for (const M of [1, 2, 3, 5]) {
      const part = addon.gemm(false, true, M, N, K, A.subarray(0, M * K), B, 'auto');
      expect([...part], `rows 0..${M - 1} of 8 computed alone`).toEqual([...all.subarray(0, M * N)]);
    }
  });
  // Blocked mode (prefill) relies on the packed kernel's bits being a function of the element alone: the AVX-512
  // tiles (8 x 32) must sum exactly as the AVX2 ones (6 x 16), so a model prefills to the same bits on any x86-64-v3
  // CPU. Sizes: ragged tiles of both shapes, several K blocks (KC = 256), column blocks past NC = 4096.
  it('the portable kernel gives the same bits with AVX-512 tiles as with AVX2 tiles', () => {
    const { gemmAvx512 } = addon.info();
    // The project's CI machines have AVX-512 (AVX-512 BF16 included); elsewhere both names run the AVX2 tiles.
    if (process.env.CI === 'true') expect(gemmAvx512, 'CI machines have AVX-512').toBe(true);
    let seed = 13;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
    for (const [M, N, K] of [[9, 33, 17], [47, 95, 300], [130, 70, 513], [16, 4100, 40]] as const)
      for (const ta of [false, true])
        for (const tb of [false, true]) {
          const A = Float32Array.from({ length: M * K }, rnd);
          const B = Float32Array.from({ length: K * N }, rnd);
          const wide = addon.gemm(ta, tb, M, N, K, A, B, 'portable');
          const narrow = addon.gemm(ta, tb, M, N, K, A, B, 'portable-avx2');
          let differ = 0;
          for (let i = 0; i < wide.length; i++) if (!Object.is(wide[i], narrow[i])) differ++;
          expect(differ, `${M}x${N}x${K} ta=${ta} tb=${tb}: elements that differ`).toBe(0);
        }
  });
  it.each(['mcprl_native.node', 'mcprl_native_test.node'])('MCPRL_PORTABLE_GEMM=1 forces the portable kernel from process start (%s)', (file) => {
    const probe = `console.log(JSON.stringify(require(${JSON.stringify(new URL(`../build/Release/${file}`, import.meta.url).pathname)}).info()))`;
    const run = (env: Record<string, string>) =>
      JSON.parse(spawnSync(process.execPath, ['-e', probe], { env: { ...process.env, ...env }, encoding: 'utf8' }).stdout) as { portableGemm: boolean; openblas: boolean };
    expect(run({ MCPRL_PORTABLE_GEMM: '1' }).portableGemm).toBe(true);
    const plain = run({ MCPRL_PORTABLE_GEMM: '0' });
    expect(plain.portableGemm).toBe(!plain.openblas);
  });
  // The guard itself (native/kernels/gemm.cc, g_blas_fork): each fork passes through its atfork handlers and each OpenBLAS
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
    const info = engineAddon.info();
    expect(addon.info().openblas).toBe(info.openblas);
    expect(info.backend).toBe('cpu');
    // The build links OpenBLAS when native/detect-blas.cjs says "yes" (a build made with MCPRL_NO_OPENBLAS=1
    // needs the same variable here, which the probe inherits).
    const detect = spawnSync(process.execPath, [new URL('../native/detect-blas.cjs', import.meta.url).pathname], { encoding: 'utf8' });
    expect(detect.stdout).toMatch(/^(yes|no)$/);
    expect(info.openblas).toBe(detect.stdout === 'yes');
  });
});

/** Seeded uniform numbers in [lo, hi) (an LCG: the same inputs on every run). */
function uniform(n: number, lo: number, hi: number, seed: number): Float32Array {
  let x = seed >>> 0;
  return Float32Array.from({ length: n }, () => lo + (hi - lo) * ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32));
}

/** max over i of |got - ref| / tol_i; at most 1 passes. */
function worst(got: Float32Array, ref: Float64Array, tol: (i: number) => number): { ratio: number; at: number } {
  let ratio = 0;
  let at = -1;
  for (let i = 0; i < ref.length; i++) {
    const r = Math.abs(got[i] - ref[i]) / tol(i);
    if (!(r <= ratio)) [ratio, at] = [r, i]; // NaN counts as worst
  }
  return { ratio, at };
}

describe('SwiGLU against a double-precision reference', () => {
  // Gates over the whole range the exponential sees: a dense random sweep, the clamp at -87 of the vector
  // exponential, dsilu's root (g ~ -1.2785), and large magnitudes. 4,099 entries: a ragged tail of 8 lanes.
  const special = [0, 1e-3, -1e-3, 1e-20, -1.2785, -1.27846454, -86.9, -87, -87.1, -88, -100, -1000, 30, 87, 88.7, 100, 1000];
  const N = 4099;
  const gate = uniform(N, -20, 20, 1);
  gate.set(special, 0);
  gate.set(uniform(200, -3, 1, 2), 100);
  const up = uniform(N, -2, 2, 3);
  const dout = uniform(N, -2, 2, 4);

  it('forward and backward: within 8e-7 relative, 1e-35 absolute, of the reference; the same bits on 1 and 2 threads', () => {
    const got = addon.swiglu(gate, up, dout, 1);
    const ref = { out: new Float64Array(N), dup: new Float64Array(N), dgate: new Float64Array(N) };
    const dgateScale = new Float64Array(N);
    for (let i = 0; i < N; i++) {
      const g = gate[i];
      const s = 1 / (1 + Math.exp(-g));
      ref.out[i] = g * s * up[i];
      ref.dup[i] = dout[i] * g * s;
      ref.dgate[i] = dout[i] * up[i] * s * (1 + g * (1 - s));
      // d silu / dg = s + g s (1 - s) crosses 0 near g = -1.2785, where any f32 evaluation loses all relative
      // precision: there the bound is relative to the magnitudes of its two terms.
      dgateScale[i] = Math.abs(dout[i] * up[i] * s) * (1 + Math.abs(g * (1 - s)));
    }
    const rel = 8e-7;
    const floor = 1e-35;
    for (const k of ['out', 'dup'] as const) {
      const w = worst(got[k], ref[k], (i) => rel * Math.abs(ref[k][i]) + floor);
      expect(w.ratio, `${k} at gate ${gate[w.at]}`).toBeLessThanOrEqual(1);
    }
    const w = worst(got.dgate, ref.dgate, (i) => rel * dgateScale[i] + floor);
    expect(w.ratio, `dgate at gate ${gate[w.at]}`).toBeLessThanOrEqual(1);
    const two = addon.swiglu(gate, up, dout, 2);
    for (const k of ['out', 'dgate', 'dup'] as const) expect(two[k]).toEqual(got[k]);
  });
});

describe('RMSNorm against a double-precision reference', () => {
  const eps = 1e-6;
  // Row widths with and without a tail of 8 lanes, from Qwen3's head_dim up; rows of very different scales.
  it.each([5, 8, 13, 128, 1000])('C = %i: within 1e-6 of the reference; the same bits on 1 and 2 threads and for a row alone', (C) => {
    const N = 9;
    const x = uniform(N * C, -1, 1, C);
    const scales = [1, 1e-3, 1e3, 3, 0.1, 1, 20, 1e-4, 1];
    for (let n = 0; n < N; n++) for (let c = 0; c < C; c++) x[n * C + c] *= scales[n];
    const w = uniform(C, 0.5, 1.5, C + 1);
    const dout = uniform(N * C, -1, 1, C + 2);
    const got = addon.rmsnorm(x, w, dout, C, eps, 1);
    const ref = { out: new Float64Array(N * C), rstd: new Float64Array(N), dx: new Float64Array(N * C), dw: new Float64Array(C) };
    const dxScale = new Float64Array(N * C);
    const dwScale = new Float64Array(C);
    for (let n = 0; n < N; n++) {
      let ss = 0;
      let dot = 0;
      for (let c = 0; c < C; c++) {
        ss += x[n * C + c] ** 2;
        dot += dout[n * C + c] * w[c] * x[n * C + c];
      }
      const r = 1 / Math.sqrt(ss / C + eps);
      ref.rstd[n] = r;
      const k = (dot * r ** 3) / C;
      for (let c = 0; c < C; c++) {
        const i = n * C + c;
        ref.out[i] = w[c] * x[i] * r;
        ref.dx[i] = r * w[c] * dout[i] - x[i] * k;
        // dx is a difference of two terms (and dw a sum over rows): the bound is relative to their magnitudes.
        dxScale[i] = Math.abs(r * w[c] * dout[i]) + Math.abs(x[i] * k);
        ref.dw[c] += dout[i] * x[i] * r;
        dwScale[c] += Math.abs(dout[i] * x[i] * r);
      }
    }
    const tol = 1e-6;
    const checks: [keyof typeof ref, (i: number) => number][] = [
      ['out', (i) => tol * Math.abs(ref.out[i])],
      ['rstd', (i) => tol * ref.rstd[i]],
      ['dx', (i) => tol * dxScale[i]],
      ['dw', (i) => tol * dwScale[i]],
    ];
    for (const [k, t] of checks) {
      const r = worst(got[k], ref[k], t);
      expect(r.ratio, `${k} at ${r.at}`).toBeLessThanOrEqual(1);
    }
    const two = addon.rmsnorm(x, w, dout, C, eps, 2);
    for (const k of ['out', 'rstd', 'dx', 'dw'] as const) expect(two[k]).toEqual(got[k]);
    // Row 2 alone: its out, rstd and dx are the same bits as in the batch of 9.
    const row = (a: Float32Array) => a.slice(2 * C, 3 * C);
    const alone = addon.rmsnorm(row(x), w, row(dout), C, eps, 2);
    expect(alone.out).toEqual(row(got.out));
    expect(alone.dx).toEqual(row(got.dx));
    expect(alone.rstd[0]).toBe(got.rstd[2]);
  });
});
