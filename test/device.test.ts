/**
 * `--device cpu|cuda|auto` (issue 44 points 2 and 7), on a machine without a GPU: the one schema field and its
 * default, the option on every command that holds a model, what `auto` picks here and why, and each line that
 * `--device cuda` fails with. A line about a piece this machine has (a driver, a GPU, the compute capability, its
 * memory, the engine on CUDA) comes from a FAKED probe answer, passed to chooseDevice in place of the library's;
 * the missing and the unloadable library come from the real loader pointed (MCPRL_CUDA_LIBRARY) at a path that does
 * not exist and at a file that is no library; "no driver" is also this machine's own answer when the library is built.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Command } from 'commander';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildProgram } from '../src/cli/main.js';
import { archRuns, chooseDevice, cudaLibraryPath, DeviceOptionsSchema, DeviceSchema, engineBackend, modelWeightBytes, type CudaProbe } from '../src/engine/device.js';
import { EngineError, Model } from '../src/engine/model.js';
import { LocalBackend } from '../src/backend/local-backend.js';
import { TrainSettingsSchema } from '../src/train/config.js';
import { oraclesRequired } from './helpers/oracles.js';
import { REPO_ROOT } from './helpers/servers.js';
import { call, FIXTURE_TARGET, stdioClient } from './mcp-server-helpers.js';

const TINY = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const haveNvcc = spawnSync('nvcc', ['--version']).status === 0;
const haveGpu = spawnSync('nvidia-smi', ['-L']).status === 0;

/** A probe answer as the library gives it on a machine with an H100 (computeCapability 90), to change one piece of. */
const h100 = (o: Partial<Extract<CudaProbe, { loaded: true }>> = {}): CudaProbe => ({
  loaded: true, archs: '80,90', status: 'ok', error: '', driverVersion: 13000, runtimeVersion: 13000, deviceCount: 1,
  name: 'NVIDIA H100 80GB HBM3', computeCapability: 90, freeBytes: 80e9, totalBytes: 85e9, ...o,
});

const savedLibrary = process.env.MCPRL_CUDA_LIBRARY;
afterEach(() => {
  if (savedLibrary === undefined) delete process.env.MCPRL_CUDA_LIBRARY;
  else process.env.MCPRL_CUDA_LIBRARY = savedLibrary;
});

describe('the device option', () => {
  it('is one schema field with one default (auto), reused by the training settings', () => {
    expect(DeviceSchema.parse(undefined)).toBe('auto');
    expect(DeviceSchema.unwrap().options).toEqual(['cpu', 'cuda', 'auto']);
    expect(TrainSettingsSchema.shape.device).toBe(DeviceOptionsSchema.shape.device);
    expect(TrainSettingsSchema.parse({}).device).toBe('auto');
    expect(TrainSettingsSchema.safeParse({ device: 'gpu' }).success).toBe(false);
  });

  it('is --device cpu|cuda|auto on train, serve, eval, backend and mcp, with the schema\'s choices and default', () => {
    const program = buildProgram();
    for (const name of ['train', 'serve', 'eval', 'backend', 'mcp']) {
      const cmd = program.commands.find((c: Command) => c.name() === name)!;
      const opt = cmd.options.find((o) => o.long === '--device');
      expect(opt, name).toBeDefined();
      expect(opt!.argChoices, name).toEqual(['cpu', 'cuda', 'auto']);
      expect(opt!.description, name).toContain('(default: auto)');
      // No commander default: a value not given stays undefined and the schema fills it in.
      expect(opt!.defaultValue, name).toBeUndefined();
    }
  });

  it('refuses a device that is not one of the choices', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/entry.ts', 'serve', '--model', TINY, '--device', 'gpu'], { cwd: REPO_ROOT, encoding: 'utf8' });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/--device <device>' argument 'gpu' is invalid\. Allowed choices are cpu, cuda, auto/);
  });
});

describe('auto and cpu on this machine', () => {
  it('cpu is cpu, without loading the CUDA library', () => {
    expect(chooseDevice('cpu')).toEqual({ requested: 'cpu', device: 'cpu', reason: '--device cpu' });
  });

  it('auto picks cpu here and says why (the library is not built, or there is no driver)', (ctx) => {
    if (haveGpu) ctx.skip('a GPU is present: auto may pick it');
    const built = existsSync(cudaLibraryPath());
    // CI runs `npm ci` on a machine with nvcc: the install built the library there.
    if (oraclesRequired() && haveNvcc) expect(built, `${cudaLibraryPath()} (npm install builds it when nvcc is found)`).toBe(true);
    const c = chooseDevice('auto', { modelDir: TINY });
    expect(c).toMatchObject({ requested: 'auto', device: 'cpu' });
    expect(c.reason).toMatch(built ? /^auto: cpu, because no NVIDIA driver \(libcuda\.so\.1 not found/ : /^auto: cpu, because the CUDA library is not built/);
  });

  it('auto picks cuda only when nothing is missing (faked: an H100 and an engine that runs on it)', () => {
    expect(chooseDevice('auto', { probe: h100(), engineReady: true })).toEqual({
      requested: 'auto', device: 'cuda', reason: 'auto: NVIDIA H100 80GB HBM3, compute capability 9.0, 74.51 GiB free',
    });
    expect(chooseDevice('auto', { probe: h100({ status: 'no-device', deviceCount: 0, error: 'no CUDA-capable device is detected' }), engineReady: true }).device).toBe('cpu');
  });

  it('the test seam $MCPRL_ENGINE_BACKEND turns cpu into cpu-staged, leaves cuda alone, and refuses anything else', () => {
    expect(engineBackend('cpu', {})).toBe('cpu');
    expect(engineBackend('cpu', { MCPRL_ENGINE_BACKEND: 'cpu-staged' })).toBe('cpu-staged');
    expect(engineBackend('cuda', { MCPRL_ENGINE_BACKEND: 'cpu-staged' })).toBe('cuda');
    expect(() => engineBackend('cpu', { MCPRL_ENGINE_BACKEND: 'cuda' })).toThrow("$MCPRL_ENGINE_BACKEND must be cpu-staged or unset, got 'cuda'");
  });

  it('a library built for sm_80 runs on 8.x devices at or above 8.0; sm_90 on 9.x', () => {
    expect(archRuns('80', 80)).toBe(true);
    expect(archRuns('80', 86)).toBe(true);
    expect(archRuns('80,90', 89)).toBe(true);
    expect(archRuns('80,90', 75)).toBe(false);
    expect(archRuns('80', 90)).toBe(false);
    expect(archRuns('90', 100)).toBe(false);
    expect(archRuns('86', 80)).toBe(false);
  });
});

describe('--device cuda where it cannot run: one line naming what is missing', () => {
  const line = (f: () => unknown): string => {
    try {
      f();
    } catch (e) {
      expect(e).toBeInstanceOf(EngineError);
      expect((e as EngineError).code).toBe('ENGINE_DEVICE');
      const msg = (e as Error).message;
      expect(msg.split('\n')).toHaveLength(1);
      return msg;
    }
    throw new Error('chooseDevice did not fail');
  };
  let tmp = '';
  beforeAll(async () => {
    tmp = await mkdtemp(path.join(tmpdir(), 'mcprl-device-'));
  });
  afterAll(async () => {
    await rm(tmp, { recursive: true, force: true });
  });

  it('the library is not built (faked: the loader pointed at a path that does not exist)', () => {
    process.env.MCPRL_CUDA_LIBRARY = path.join(tmp, 'nowhere', 'libmcprl_cuda.so');
    expect(line(() => chooseDevice('cuda'))).toBe(
      `--device cuda cannot run: the CUDA library is not built (${process.env.MCPRL_CUDA_LIBRARY} is missing: nvcc was not on the PATH at install, or its compile failed; run \`node native/cuda/build-lib.cjs\`)`,
    );
  });

  it('the library cannot be loaded (faked: the loader pointed at a file that is no library; the real dlopen, in a process of its own)', async () => {
    // A process loads one CUDA library: this one may have loaded the real one already, so the check runs apart.
    const bogus = path.join(tmp, 'libbogus.so');
    await writeFile(bogus, 'not an ELF file');
    const script = path.join(tmp, 'load.ts');
    await writeFile(script, `import { chooseDevice } from ${JSON.stringify(path.join(REPO_ROOT, 'src', 'engine', 'device.ts'))};\n` +
      "try { chooseDevice('cuda'); } catch (e) { console.log(`${(e as { code: string }).code} ${(e as Error).message}`); }\n");
    const r = spawnSync(process.execPath, ['--import', 'tsx', script], { cwd: REPO_ROOT, encoding: 'utf8', env: { ...process.env, MCPRL_CUDA_LIBRARY: bogus } });
    expect(r.stdout.trim().split('\n'), r.stderr).toEqual([
      expect.stringMatching(new RegExp(`^ENGINE_DEVICE --device cuda cannot run: the CUDA library ${bogus} could not be loaded: .*(invalid ELF header|file too short)`)),
    ]);
  });

  it('no driver (this machine\'s own answer when the library is built; else faked)', (ctx) => {
    if (haveGpu) ctx.skip('a GPU is present here');
    const real = existsSync(cudaLibraryPath());
    const probe = real ? undefined : h100({ status: 'no-driver', driverVersion: 0, deviceCount: 0, error: 'CUDA driver version is insufficient for CUDA runtime version' });
    expect(line(() => chooseDevice('cuda', probe ? { probe } : {}))).toBe(
      '--device cuda cannot run: no NVIDIA driver (libcuda.so.1 not found or too old for CUDA 13.0: CUDA driver version is insufficient for CUDA runtime version)',
    );
  });

  it('no device (faked: a driver that sees no GPU)', () => {
    const probe = h100({ status: 'no-device', deviceCount: 0, error: 'no CUDA-capable device is detected' });
    expect(line(() => chooseDevice('cuda', { probe }))).toBe('--device cuda cannot run: no CUDA device (driver 13.0 found, no GPU visible: no CUDA-capable device is detected)');
  });

  it('a compute capability the library was not built for (faked: a 7.5 GPU, a library for sm_80 and sm_90)', () => {
    const probe = h100({ name: 'Tesla T4', computeCapability: 75 });
    expect(line(() => chooseDevice('cuda', { probe }))).toBe(
      '--device cuda cannot run: the GPU (Tesla T4, compute capability 7.5) is not one the CUDA library was built for (sm_80, sm_90): rebuild with `MCPRL_CUDA_ARCH=75 node native/cuda/build-lib.cjs`',
    );
  });

  it('not enough memory for the model (faked: 1 MiB free), with the bytes needed and free', () => {
    const need = modelWeightBytes(TINY);
    expect(need).toBeGreaterThan(2 ** 20);
    const probe = h100({ freeBytes: 2 ** 20, totalBytes: 2 ** 34 });
    expect(line(() => chooseDevice('cuda', { probe, modelDir: TINY }))).toBe(
      `--device cuda cannot run: not enough GPU memory for the model: its weights need ${need} bytes (${(need / 2 ** 30).toFixed(2)} GiB), 1048576 bytes (0.00 GiB) are free on NVIDIA H100 80GB HBM3 of 16.00 GiB`,
    );
  });

  it('everything present (faked: an H100): cuda given explicitly runs; auto stays on cpu until a device run verifies the path', () => {
    expect(chooseDevice('cuda', { probe: h100(), modelDir: TINY })).toEqual({
      requested: 'cuda', device: 'cuda', reason: '--device cuda: NVIDIA H100 80GB HBM3, compute capability 9.0, 74.51 GiB free',
    });
    expect(chooseDevice('auto', { probe: h100(), modelDir: TINY })).toEqual({
      requested: 'auto', device: 'cpu', reason: 'auto: cpu, because the engine on the CUDA backend is not yet verified by a device run (issue 44): --device cuda runs it',
    });
  });

  it('Model.load and LocalBackend refuse it before reading a weight', async () => {
    process.env.MCPRL_CUDA_LIBRARY = path.join(tmp, 'nowhere', 'libmcprl_cuda.so');
    await expect(Model.load(TINY, { device: 'cuda' })).rejects.toMatchObject({ code: 'ENGINE_DEVICE', message: expect.stringMatching(/^--device cuda cannot run: the CUDA library is not built/) });
    const backend = new LocalBackend({ dir: path.join(tmp, 'backend'), device: 'cuda' });
    try {
      await expect(backend.register({ project: 'p', name: 'm', baseModel: TINY })).rejects.toThrow(/--device cuda cannot run: the CUDA library is not built/);
    } finally {
      await backend.close();
    }
  });
});

describe('the commands fail before any run folder or server exists', () => {
  const cli = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/entry.ts', ...args], { cwd: REPO_ROOT, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
  let tmp = '';
  beforeAll(async () => {
    tmp = await mkdtemp(path.join(tmpdir(), 'mcprl-device-cli-'));
  });
  afterAll(async () => {
    await rm(tmp, { recursive: true, force: true });
  });
  // Faked: the loader pointed at a library that does not exist, so the line is the same on every machine.
  const noLibrary = () => ({ MCPRL_CUDA_LIBRARY: path.join(tmp, 'nowhere', 'libmcprl_cuda.so') });

  it('mcprl train --device cuda exits 1 with one line, and the run folder does not exist', () => {
    const runs = path.join(tmp, 'runs');
    const r = cli(['train', '--model', TINY, '--scenarios', 'fixtures/scenarios/bookshop', '--run', 'r', '--runs-dir', runs, '--device', 'cuda', '--', process.execPath, '--import', 'tsx', 'fixtures/server/main.ts'], noLibrary());
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^mcprl train: --device cuda cannot run: the CUDA library is not built \(/)]);
    expect(existsSync(path.join(runs, 'r'))).toBe(false);
    expect(existsSync(runs)).toBe(false);
  });

  it('npm run demo -- --device passes it on: a bad value and cuda where it cannot run exit 1, no run folder', () => {
    const demo = (args: string[], env: NodeJS.ProcessEnv = {}) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'scripts/demo.ts', ...args], { cwd: REPO_ROOT, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
    const bad = demo(['--device', 'gpu']);
    expect(bad.status).toBe(1);
    expect(bad.stderr.trim()).toBe('--device gpu: expected one of cpu, cuda, auto');
    const runs = path.join(tmp, 'demo-runs');
    const cuda = demo(['--device', 'cuda', '--runs-dir', runs, '--run', 'd'], noLibrary());
    expect(cuda.status).toBe(1);
    expect(cuda.stderr).toMatch(/^mcprl train: --device cuda cannot run: the CUDA library is not built/m);
    expect(existsSync(path.join(runs, 'd'))).toBe(false);
  });

  it('mcprl eval --model DIR --device cuda exits 1 with one line, and its output folder does not exist', () => {
    const out = path.join(tmp, 'eval-out');
    const r = cli(['eval', '--model', TINY, '--scenarios', 'fixtures/scenarios/bookshop', '--out', out, '--device', 'cuda', '--', process.execPath, '--import', 'tsx', 'fixtures/server/main.ts'], noLibrary());
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^mcprl eval: --device cuda cannot run: the CUDA library is not built \(/)]);
    expect(existsSync(out)).toBe(false);
  });

  it('mcprl serve --device cuda exits non-zero before listening', () => {
    const r = cli(['serve', '--model', TINY, '--port', '0', '--device', 'cuda'], noLibrary());
    expect(r.status).not.toBe(0);
    expect(r.stdout).not.toContain('listening');
    expect(r.stderr).toMatch(/--device cuda cannot run: the CUDA library is not built/);
  });

  it("mcprl mcp's start_training with options.device cuda fails the call naming what is missing, and no run folder exists", async () => {
    const ws = path.join(tmp, 'mcp-ws');
    await cp(TINY, path.join(ws, 'model'), { recursive: true });
    const { client } = await stdioClient(['--workspace', ws], noLibrary());
    try {
      const r = await call(client, 'start_training', { target: FIXTURE_TARGET, model: 'model', offline: true, run: 'r', options: { device: 'cuda' } });
      expect(r.isError, r.text).toBe(true);
      expect(r.text).toMatch(/--device cuda cannot run: the CUDA library is not built/);
      expect(existsSync(path.join(ws, 'r'))).toBe(false);
    } finally {
      await client.close();
    }
  });

  it('mcprl backend and mcprl mcp --device cuda exit non-zero before listening', () => {
    for (const args of [['backend', '--dir', path.join(tmp, 'b'), '--port', '0'], ['mcp', '--workspace', path.join(tmp, 'ws'), '--http', '0']]) {
      const r = cli([...args, '--device', 'cuda'], noLibrary());
      expect(r.status, args[0]).not.toBe(0);
      expect(r.stdout + r.stderr, args[0]).not.toContain('listening');
      expect(r.stderr, args[0]).toMatch(/--device cuda cannot run: the CUDA library is not built/);
    }
    expect(existsSync(path.join(tmp, 'b'))).toBe(false);
  });
});
