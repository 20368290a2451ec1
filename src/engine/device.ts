/**
 * Which device the engine runs on (issue 44): `--device cpu|cuda|auto`, one schema field with one default, on
 * every command that holds a model and on the library's LocalBackend.
 *
 * The CUDA library (build/cuda/libmcprl_cuda.so, built by `npm install` when nvcc is found: native/cuda/build-lib.cjs)
 * is loaded lazily by the addon, only here, only when `cuda` or `auto` is asked for. `cuda` runs where the library, a
 * driver, a device it was built for and memory for the model are all present; `auto` picks it there too once a device
 * run has verified the engine on it (CUDA_ENGINE_READY), else cpu, and says why.
 * `cuda` where it cannot run is an EngineError ENGINE_DEVICE whose message is one line naming what is missing,
 * thrown before any run folder is created or server started (the commands call chooseDevice first).
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { EngineError, loadNative } from './native.js';

/** Where the engine runs: cpu, cuda (fails where it cannot), or auto (cuda where it can run, else cpu). Default auto. */
export const DeviceSchema = z.enum(['cpu', 'cuda', 'auto']).default('auto');
export type Device = z.infer<typeof DeviceSchema>;
/** The field's help text, shared by every command's --device. */
export const DEVICE_HELP = 'where the engine runs: cpu, cuda (fails naming what is missing), or auto (cuda where a usable GPU and the built CUDA library are present, else cpu)';

/** What the device choice came to, as a run's config.json and its first progress line keep it. */
export const DeviceChoiceSchema = z.object({
  /** What was asked for. */
  requested: z.enum(['cpu', 'cuda', 'auto']),
  /** Where the engine runs. */
  device: z.enum(['cpu', 'cuda']),
  /** Why, in one line. */
  reason: z.string(),
});
export type DeviceChoice = z.infer<typeof DeviceChoiceSchema>;

/** What the addon's cudaProbe returns (native/addon/addon.cc, native/cuda/entry.h). */
export type CudaProbe =
  | { loaded: false; error: string }
  | {
      loaded: true;
      /** Compute capabilities the library holds machine code for: "80,90". */
      archs: string;
      status: 'ok' | 'no-driver' | 'no-device' | 'error';
      error: string;
      driverVersion: number;
      runtimeVersion: number;
      deviceCount: number;
      name: string;
      /** Device 0's, as 10 × major + minor (90 for 9.0). */
      computeCapability: number;
      freeBytes: number;
      totalBytes: number;
    };

/**
 * Whether `auto` may pick CUDA. The engine's generation and training run on the CUDA Backend table from Node (the
 * same orchestration CI runs on cpu-staged, below), but no device run has verified that path yet (issue 44 points
 * 5-6): until one does, auto stays on cpu where a usable GPU probes fine, and `--device cuda` given explicitly runs it.
 */
export const CUDA_ENGINE_READY = false;
const UNVERIFIED = 'the engine on the CUDA backend is not yet verified by a device run (issue 44): --device cuda runs it';

/**
 * The Backend table the engine runs on (native/backend/backend.h): the device's, or `cpu-staged`, the CPU backend with its
 * memory declared elsewhere — every buffer in a guarded range host code cannot touch, every host<->backend move an
 * upload or download (native/backend/backend_staged.cc) — so that a CPU run exercises the orchestration a GPU run needs.
 * cpu-staged is a test seam, not a user's choice: $MCPRL_ENGINE_BACKEND=cpu-staged, read here only, on a cpu device.
 */
export type EngineBackend = 'cpu' | 'cpu-staged' | 'cuda';
export const ENGINE_BACKEND_ENV = 'MCPRL_ENGINE_BACKEND';

/** The backend for a chosen device ($MCPRL_ENGINE_BACKEND=cpu-staged turns cpu into cpu-staged; anything else set there is refused). */
export function engineBackend(device: DeviceChoice['device'], env: NodeJS.ProcessEnv = process.env): EngineBackend {
  const v = env[ENGINE_BACKEND_ENV];
  if (v === undefined || v === '') return device;
  if (v !== 'cpu-staged') throw new EngineError('ENGINE_DEVICE', `$${ENGINE_BACKEND_ENV} must be cpu-staged or unset, got '${v}'`);
  return device === 'cpu' ? 'cpu-staged' : device;
}

/** The library's file name under build/cuda (native/cuda/build-lib.cjs). */
export const CUDA_LIBRARY = 'libmcprl_cuda.so';

/** The library to load: $MCPRL_CUDA_LIBRARY when set (tests point it elsewhere), else build/cuda/ above this file. */
export function cudaLibraryPath(): string {
  if (process.env.MCPRL_CUDA_LIBRARY) return process.env.MCPRL_CUDA_LIBRARY;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'build', 'Release'))) return join(dir, 'build', 'cuda', CUDA_LIBRARY);
    dir = dirname(dir);
  }
  return join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'build', 'cuda', CUDA_LIBRARY);
}

let probed: { path: string; probe: CudaProbe } | undefined;

/**
 * Loads the CUDA library (the first call in the process) and asks it what this machine has. A missing library
 * file is reported without loading anything.
 */
export function probeCuda(path = cudaLibraryPath()): CudaProbe {
  if (probed?.path === path) return probed.probe;
  const probe: CudaProbe = existsSync(path)
    ? loadNative().cudaProbe(path)
    : { loaded: false, error: 'not-built' };
  // Driver, device and memory may change while the process runs; the library's load does not.
  if (!probe.loaded || probe.status !== 'ok') probed = { path, probe };
  return probe;
}

/** The GPU's free bytes now (the library loaded and probing ok: after chooseDevice picked cuda). */
export function cudaFreeBytes(): number {
  const p = probeCuda();
  if (!p.loaded || p.status !== 'ok') throw new EngineError('ENGINE_DEVICE', `the CUDA device is gone: ${p.error}`);
  return p.freeBytes;
}

const GIB = 2 ** 30;
const gib = (b: number) => `${(b / GIB).toFixed(2)} GiB`;

/** Whether a library built for `archs` ("80,90") runs on a device of compute capability cc (same major, minor at least). */
export function archRuns(archs: string, cc: number): boolean {
  return archs.split(',').map(Number).some((a) => Number.isFinite(a) && Math.floor(a / 10) === Math.floor(cc / 10) && a % 10 <= cc % 10);
}

/** Bytes the model's weights take on the device: its safetensors files, as stored (to_backend copies them as loaded). */
export function modelWeightBytes(modelDir: string): number {
  let bytes = 0;
  // A folder that cannot be read weighs nothing here: loading it says what is wrong with it.
  if (!existsSync(modelDir) || !statSync(modelDir).isDirectory()) return 0;
  for (const f of readdirSync(modelDir)) if (f.endsWith('.safetensors')) bytes += statSync(join(modelDir, f)).size;
  return bytes;
}

/** What stops CUDA from running here, in words (null: nothing does). */
export function cudaMissing(probe: CudaProbe, o: { libraryPath: string; modelBytes?: () => number }): string | null {
  if (!probe.loaded) {
    if (probe.error === 'not-built') {
      return `the CUDA library is not built (${o.libraryPath} is missing: nvcc was not on the PATH at install, or its compile failed; run \`node native/cuda/build-lib.cjs\`)`;
    }
    return `the CUDA library ${o.libraryPath} could not be loaded: ${probe.error}`;
  }
  const driver = (v: number) => `${Math.floor(v / 1000)}.${(v % 1000) / 10}`;
  if (probe.status === 'no-driver') return `no NVIDIA driver (libcuda.so.1 not found or too old for CUDA ${driver(probe.runtimeVersion)}: ${probe.error})`;
  if (probe.status === 'no-device') return `no CUDA device (driver ${driver(probe.driverVersion)} found, no GPU visible: ${probe.error})`;
  if (probe.status === 'error') return `CUDA error while probing the GPU: ${probe.error}`;
  const cc = probe.computeCapability;
  if (!archRuns(probe.archs, cc)) {
    const built = probe.archs.split(',').map((a) => `sm_${a}`).join(', ');
    return `the GPU (${probe.name}, compute capability ${Math.floor(cc / 10)}.${cc % 10}) is not one the CUDA library was built for (${built}): rebuild with \`MCPRL_CUDA_ARCH=${cc} node native/cuda/build-lib.cjs\``;
  }
  const need = o.modelBytes?.() ?? 0;
  if (need > probe.freeBytes) {
    return `not enough GPU memory for the model: its weights need ${need} bytes (${gib(need)}), ${probe.freeBytes} bytes (${gib(probe.freeBytes)}) are free on ${probe.name} of ${gib(probe.totalBytes)}`;
  }
  return null;
}

export interface ChooseDeviceOptions {
  /** The model folder whose weights must fit the GPU's free memory (left out: no memory check). */
  modelDir?: string;
  /** The probe's answer, for tests that fake a missing piece; default probeCuda(). */
  probe?: CudaProbe;
  /** Whether auto may pick CUDA (tests); default CUDA_ENGINE_READY. */
  engineReady?: boolean;
}

/**
 * Resolves `--device`: cpu as asked; auto to cuda where nothing is missing, else cpu with the reason; cuda where
 * nothing is missing, else an EngineError ENGINE_DEVICE whose message names what is.
 */
export function chooseDevice(requested: Device | undefined, o: ChooseDeviceOptions = {}): DeviceChoice {
  const asked = DeviceSchema.parse(requested);
  if (asked === 'cpu') return { requested: asked, device: 'cpu', reason: '--device cpu' };
  const libraryPath = cudaLibraryPath();
  const probe = o.probe ?? probeCuda(libraryPath);
  const modelDir = o.modelDir;
  const modelBytes = modelDir !== undefined ? () => modelWeightBytes(modelDir) : undefined;
  const missing = cudaMissing(probe, { libraryPath, modelBytes }) ?? (asked === 'cuda' || (o.engineReady ?? CUDA_ENGINE_READY) ? null : UNVERIFIED);
  if (missing === null) {
    const p = probe as Extract<CudaProbe, { loaded: true }>;
    const gpu = `${p.name}, compute capability ${Math.floor(p.computeCapability / 10)}.${p.computeCapability % 10}, ${gib(p.freeBytes)} free`;
    return { requested: asked, device: 'cuda', reason: `${asked === 'auto' ? 'auto: ' : '--device cuda: '}${gpu}` };
  }
  if (asked === 'auto') return { requested: asked, device: 'cpu', reason: `auto: cpu, because ${missing}` };
  throw new EngineError('ENGINE_DEVICE', `--device cuda cannot run: ${missing}`);
}

/** The choice in one line, for a run's first progress line and a server's start line. */
export function describeDevice(c: DeviceChoice): string {
  return `device ${c.device} (${c.reason})`;
}

/** The one `device` field, as a schema of its own for the commands that add it beside their other options. */
export const DeviceOptionsSchema = z.object({
  /** Where the engine runs: cpu, cuda or auto. Default auto. */
  device: DeviceSchema.describe(DEVICE_HELP),
});
