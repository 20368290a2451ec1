/**
 * The CUDA backend (native/cuda, issue 17) on a machine without a GPU: what CI can prove.
 *   - with nvcc on the PATH, scripts/device-check.sh --cpu-only compiles every native/cuda/*.cu and
 *     native/cuda/check/*.cu for sm_90 and links the standalone check executables with the CPU ops
 *     (native/cuda/build.sh);
 *   - that executable, with no CUDA device, says so in one JSON line and exits 2 (it never claims a pass);
 *   - the dry mode meets the PyTorch oracle of the device run (scripts/device-check.py, float64) with the CPU ops
 *     on small dumped cases, tolerance 1e-4 (f32 against f64), and the oracle fails a result that is off;
 *   - the model check (the engine's model and trainer on a backend's own memory, mcprl-cuda-model-check) links,
 *     and its staged run, the CPU backend with its memory declared elsewhere so that every copy, transfer and
 *     staged array the CUDA backend relies on runs, gives the plain CPU run's log-probabilities and LoRA gradient
 *     bit for bit; without a device its GPU modes exit 2.
 * And the library the addon loads lazily for --device (native/cuda/build-lib.cjs, run by `npm install`):
 *   - build/cuda/libmcprl_cuda.so is built from native/cuda with the local nvcc (under CI=true, by `npm ci` itself),
 *     exports its four C entry points, loads through the addon and answers the probe (here: no driver);
 *   - a missing nvcc and a failed compile (a FAKE nvcc that fails) are one line each, exit 0, no library.
 * What the CUDA kernels compute is checked only on the GPU machine (native/cuda/README.md says how). Without
 * nvcc these tests skip with the reason; under CI=true (this machine kind has nvcc 13) a missing nvcc fails.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cudaLibraryPath, type CudaProbe } from '../src/engine/device.js';
import { loadNative } from '../src/engine/native.js';
import { oraclesRequired, PYTHON, requireOracle } from './helpers/oracles.js';

const ROOT = join(import.meta.dirname, '..');
const haveNvcc = spawnSync('nvcc', ['--version'], { encoding: 'utf8' }).status === 0;
const haveGpu = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8' }).status === 0;
// Compiling the CUDA sources and the CPU ops takes about 2.5 minutes on two loaded cores.
const BUILD_TIMEOUT = 900_000;

interface Line { figure: string; ok?: boolean; mode?: string; skipped?: string; tensors?: Record<string, { rel: number; ok: boolean }> }
const lines = (stdout: string): Line[] =>
  stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);

describe('the CUDA backend builds without a GPU', () => {
  let build = '';
  let dry: ReturnType<typeof spawnSync> | undefined;
  beforeAll(async () => {
    if (!haveNvcc) {
      if (oraclesRequired()) throw new Error('nvcc is required under CI (this machine kind has CUDA 13): not on the PATH');
      return;
    }
    build = await mkdtemp(join(tmpdir(), 'mcprl-cuda-'));
    dry = spawnSync('bash', [join(ROOT, 'scripts/device-check.sh'), '--cpu-only'], {
      encoding: 'utf8',
      env: { ...process.env, MCPRL_CUDA_BUILD: build, MCPRL_PYTHON: PYTHON, OUT: '' },
      timeout: BUILD_TIMEOUT,
    });
  }, BUILD_TIMEOUT);
  afterAll(async () => {
    if (build) await rm(build, { recursive: true, force: true });
  });

  it('compiles native/cuda for sm_90 and links the check executable (device-check.sh --cpu-only)', (ctx) => {
    if (!haveNvcc) ctx.skip('nvcc not on the PATH');
    const out = lines(String(dry!.stdout));
    expect(dry!.status, String(dry!.stdout) + String(dry!.stderr)).toBe(0);
    expect(out.find((l) => l.figure === 'device-check.build')?.ok).toBe(true);
    expect(out.at(-1)).toMatchObject({ figure: 'device-check', ok: true, mode: 'dry' });
    expect(existsSync(join(build, 'mcprl-cuda-check'))).toBe(true);
    expect(out.find((l) => l.figure === 'cuda.model.staged')?.ok).toBe(true);
  });

  it('the model check runs the model and trainer through staged memory bit for bit, and refuses GPU modes without one', (ctx) => {
    if (!haveNvcc) ctx.skip('nvcc not on the PATH');
    const exe = join(build, 'mcprl-cuda-model-check');
    const staged = spawnSync(exe, ['staged', join(ROOT, 'fixtures/models/tiny-bookshop')], { encoding: 'utf8' });
    expect(staged.status, staged.stdout + staged.stderr).toBe(0);
    expect(lines(staged.stdout)).toMatchObject([{ figure: 'cuda.model.staged', ok: true }]);
    if (haveGpu) ctx.skip('a GPU is present here: scripts/device-check.sh runs the GPU modes');
    const bench = spawnSync(exe, ['bench', '4b'], { encoding: 'utf8' });
    expect(bench.status).toBe(2);
    expect(lines(bench.stdout)).toMatchObject([{ figure: 'cuda.model', ok: false }]);
  });

  it('the check executable refuses to pass without a CUDA device: one JSON line, exit 2', (ctx) => {
    if (!haveNvcc) ctx.skip('nvcc not on the PATH');
    if (haveGpu) ctx.skip('a GPU is present here: scripts/device-check.sh is the check to run');
    const r = spawnSync(join(build, 'mcprl-cuda-check'), [], { encoding: 'utf8' });
    expect(r.status).toBe(2);
    const out = lines(r.stdout);
    expect(out).toHaveLength(1);
    expect(out[0]).toMatchObject({ figure: 'cuda.check', ok: false });
    expect(out[0].skipped).toMatch(/no CUDA device/);
  });

  it('the PyTorch oracle agrees with the CPU ops on every dumped case (1e-4) and fails a result that is off', async (ctx) => {
    if (!haveNvcc) ctx.skip('nvcc not on the PATH');
    requireOracle('torch', ctx);
    const dump = join(build, 'dump-cpu');
    const agree = lines(String(dry!.stdout)).filter((l) => l.figure.startsWith('torch.') && l.tensors);
    expect(agree.map((l) => l.figure).sort()).toEqual([
      'torch.attention_quick_d128_gqa4', 'torch.attention_quick_d40_gqa2', 'torch.linear_lora', 'torch.lm_head_bf16_V5000',
      'torch.rmsnorm_hidden', 'torch.rmsnorm_per_head', 'torch.rope',
    ]);
    for (const l of agree) for (const [name, t] of Object.entries(l.tensors!)) expect(t.rel, `${l.figure} ${name}`).toBeLessThan(1e-4);
    // One attention output element off by 1e-3 of the tensor's scale: the oracle must say so and exit 1.
    const bad = join(build, 'dump-bad');
    await cp(join(dump, 'attention_quick_d40_gqa2'), join(bad, 'attention_quick_d40_gqa2'), { recursive: true });
    const file = join(bad, 'attention_quick_d40_gqa2', 'cpu.out.bin');
    const buf = await readFile(file);
    const f = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
    const scale = f.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
    f[1234] += 1e-3 * scale;
    await writeFile(file, buf);
    const r = spawnSync(PYTHON, [join(ROOT, 'scripts/device-check.py'), '--dump', bad], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(1);
    const caseLine = lines(r.stdout).find((l) => l.figure === 'torch.attention_quick_d40_gqa2')!;
    expect(caseLine.ok).toBe(false);
    expect(caseLine.tensors!['cpu.out'].ok).toBe(false);
    expect(caseLine.tensors!['cpu.dq'].ok).toBe(true);
  });
});

describe('the CUDA library for --device (native/cuda/build-lib.cjs, run by npm install)', () => {
  const buildLib = join(ROOT, 'native', 'cuda', 'build-lib.cjs');
  let lib = cudaLibraryPath();
  let tmp = '';
  beforeAll(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'mcprl-cuda-lib-'));
    if (!haveNvcc || existsSync(lib)) return;
    // `npm ci` builds it wherever nvcc is found: under CI its absence is a failure of the install.
    if (oraclesRequired()) throw new Error(`${lib} is missing although nvcc is on the PATH: npm install should have built it`);
    // A checkout installed before the library existed: build one here, for sm_90 alone (half the time).
    const r = spawnSync(process.execPath, [buildLib, join(tmp, 'lib')], { encoding: 'utf8', env: { ...process.env, MCPRL_CUDA_ARCH: '90' }, timeout: BUILD_TIMEOUT });
    lib = join(tmp, 'lib', 'libmcprl_cuda.so');
    if (!existsSync(lib)) throw new Error(`build-lib.cjs built nothing: ${r.stdout}${r.stderr}`);
  }, BUILD_TIMEOUT);
  afterAll(async () => {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  it('compiles native/cuda with the local nvcc into a library with the four entry points, which the addon loads and probes', (ctx) => {
    if (!haveNvcc) ctx.skip('nvcc not on the PATH');
    const nm = spawnSync('nm', ['-D', '--defined-only', lib], { encoding: 'utf8' });
    expect(nm.status, nm.stderr).toBe(0);
    for (const sym of ['mcprl_cuda_abi', 'mcprl_cuda_archs', 'mcprl_cuda_probe', 'mcprl_cuda_backend']) expect(nm.stdout).toMatch(new RegExp(` T ${sym}$`, 'm'));
    const archs = readFileSync(join(dirname(lib), 'archs.txt'), 'utf8').trim();
    const probe = (loadNative() as unknown as { cudaProbe(p: string): CudaProbe }).cudaProbe(lib);
    expect(probe).toMatchObject({ loaded: true, archs });
    if (!haveGpu) {
      expect(archs).toMatch(/^(80,90|90)$/);
      expect(probe).toMatchObject({ status: 'no-driver', driverVersion: 0, deviceCount: 0 });
    }
  });

  it('without nvcc: one line, exit 0, no library', async () => {
    const out = join(tmp, 'none');
    const r = spawnSync(process.execPath, [buildLib, out], { encoding: 'utf8', env: { ...process.env, NVCC: join(tmp, 'no-such-nvcc') } });
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split('\n')).toEqual([`mcprl: CUDA library not built: ${join(tmp, 'no-such-nvcc')} not found on the PATH (a CPU install)`]);
    expect(r.stderr).toBe('');
    expect(existsSync(join(out, 'libmcprl_cuda.so'))).toBe(false);
  });

  it('a failed compile (FAKED: an nvcc that answers --version and fails every compile): one line, exit 0, no library, the output in build.log', async () => {
    const fake = join(tmp, 'fake-nvcc');
    await writeFile(fake, '#!/bin/sh\n[ "$1" = --version ] && { echo fake nvcc; exit 0; }\necho "error: this nvcc is a fake" >&2\nexit 1\n');
    await chmod(fake, 0o755);
    const out = join(tmp, 'failed');
    const r = spawnSync(process.execPath, [buildLib, out], { encoding: 'utf8', env: { ...process.env, NVCC: fake, MCPRL_CUDA_ARCH: '90' } });
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split('\n')).toEqual([expect.stringMatching(/^mcprl: CUDA library not built: native\/cuda\/\w+\.cu did not compile with .*fake-nvcc \(its output: .*build\.log\)$/)]);
    expect(r.stderr).toBe('');
    expect(existsSync(join(out, 'libmcprl_cuda.so'))).toBe(false);
    expect(readFileSync(join(out, 'build.log'), 'utf8')).toContain('this nvcc is a fake');
  });
});
