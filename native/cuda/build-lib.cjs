// Builds the CUDA library the addon loads lazily (native/cuda/entry.h): build/cuda/libmcprl_cuda.so from
// native/cuda/*.cu (not the standalone checks in native/cuda/check/) and the few CPU sources they need.
// `npm install` runs it after the addon (native/build.cjs) when nvcc is on the PATH. It never fails the install:
// a missing nvcc or a failed compile prints one line, `mcprl: CUDA library not built: <why>`, exits 0, and the
// install is the CPU one. Arguments:
//   node native/cuda/build-lib.cjs [OUT_DIR]   (default build/cuda)
//   MCPRL_CUDA_ARCH=90 or 80,90   the compute capabilities to build for; default: the GPU's
//                                 (nvidia-smi --query-gpu=compute_cap) when one is present, else 80 and 90
//   MCPRL_CUDA_LIB=skip           no library (a CPU install on a machine with nvcc)
//   JOBS=n                        parallel compiles (default: all cores)
// Incremental: an object is rebuilt only when its source or a header it includes (its .d file) is newer.
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '..', '..');
const out = path.resolve(process.argv[2] ?? path.join(root, 'build', 'cuda'));
const nvcc = process.env.NVCC || 'nvcc';
const skip = (why) => {
  console.log(`mcprl: CUDA library not built: ${why}`);
  process.exit(0);
};

if (process.env.MCPRL_CUDA_LIB === 'skip') skip('MCPRL_CUDA_LIB=skip');
if (spawnSync(nvcc, ['--version'], { stdio: 'ignore' }).status !== 0) skip(`${nvcc} not found on the PATH (a CPU install)`);

function archs() {
  const env = process.env.MCPRL_CUDA_ARCH;
  if (env) return env.split(',').map((a) => a.trim().replace('.', '')).filter(Boolean);
  const smi = spawnSync('nvidia-smi', ['--query-gpu=compute_cap', '--format=csv,noheader'], { encoding: 'utf8' });
  if (smi.status === 0) {
    const caps = [...new Set(smi.stdout.split('\n').map((l) => l.trim().replace('.', '')).filter((l) => /^\d+$/.test(l)))];
    if (caps.length) return caps;
  }
  return ['80', '90'];
}
const sms = archs();
if (!sms.every((a) => /^\d+$/.test(a))) skip(`MCPRL_CUDA_ARCH=${process.env.MCPRL_CUDA_ARCH}: want numbers such as 80,90`);
const gencode = sms.flatMap((a) => ['-gencode', `arch=compute_${a},code=sm_${a}`]);

const cudaDir = path.join(root, 'native', 'cuda');
const cu = fs.readdirSync(cudaDir).filter((f) => f.endsWith('.cu'));
const cpu = ['native/core/common.cc'];
const sources = [...cu.map((f) => path.join('native', 'cuda', f)), ...cpu];
const mtime = (p) => (fs.existsSync(p) ? fs.statSync(p).mtimeMs : 0);
// What an object was built from: its source and the headers the compiler listed in its .d file (-MD).
function stale(src, obj) {
  const built = mtime(obj);
  const dep = obj.replace(/\.o$/, '.d');
  if (!built || !fs.existsSync(dep)) return true;
  const files = fs.readFileSync(dep, 'utf8').replace(/\\\n/g, ' ').split(/:\s/).slice(1).join(' ').split(/\s+/).filter(Boolean);
  return [path.join(root, src), ...files].some((f) => mtime(path.resolve(root, f)) > built);
}
const archTag = sms.join(',');
const objDir = path.join(out, 'obj', `sm_${sms.join('_')}`);
fs.mkdirSync(objDir, { recursive: true });

const nvflags = ['-std=c++17', '-O3', '-Xcompiler', '-fPIC', `-DMCPRL_CUDA_ARCHS="${archTag}"`, ...gencode];
const cxxflags = ['-std=c++17', '-O3', '-fPIC', '-Wall', '-Wno-unused-function'];
const jobs = Math.max(1, Number(process.env.JOBS) || os.availableParallelism?.() || os.cpus().length);

function run(cmd, args) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    p.stdout.on('data', (d) => (text += d));
    p.stderr.on('data', (d) => (text += d));
    p.on('error', (e) => resolve({ ok: false, text: String(e) }));
    p.on('close', (code) => resolve({ ok: code === 0, text }));
  });
}

async function main() {
  const t0 = Date.now();
  const objects = sources.map((s) => path.join(objDir, s.replace(/[/\\]/g, '_') + '.o'));
  const todo = sources
    .map((s, i) => ({ src: s, obj: objects[i] }))
    .filter(({ src, obj }) => stale(src, obj));
  let failed = null;
  const queue = [...todo];
  await Promise.all(
    Array.from({ length: Math.min(jobs, queue.length) }, async () => {
      for (let job = queue.shift(); job && !failed; job = queue.shift()) {
        const args = job.src.endsWith('.cu')
          ? [nvcc, [...nvflags, '-MD', '-MF', job.obj.replace(/\.o$/, '.d'), '-c', job.src, '-o', job.obj]]
          : [process.env.CXX || 'g++', [...cxxflags, '-MD', '-MF', job.obj.replace(/\.o$/, '.d'), '-c', job.src, '-o', job.obj]];
        const r = await run(...args);
        if (!r.ok) failed = { src: job.src, text: r.text };
      }
    }),
  );
  const lib = path.join(out, 'libmcprl_cuda.so');
  // A failure is one line on the console; what the compiler said goes to build.log beside the library.
  const log = path.join(out, 'build.log');
  const shown = path.relative(process.cwd(), log) || log;
  if (failed) {
    fs.writeFileSync(log, failed.text);
    fs.rmSync(lib, { force: true });
    skip(`${failed.src} did not compile with ${nvcc} (its output: ${shown})`);
  }
  if (todo.length === 0 && fs.existsSync(lib) && objects.every((o) => mtime(o) <= mtime(lib)) &&
      fs.existsSync(path.join(out, 'archs.txt')) && fs.readFileSync(path.join(out, 'archs.txt'), 'utf8').trim() === archTag) {
    console.log(`mcprl: CUDA library up to date: ${path.relative(root, lib) || lib} (sm_${sms.join(', sm_')})`);
    return;
  }
  // The CUDA runtime is linked statically (nvcc's default): the library needs only the driver, libcuda.so.1,
  // which the runtime opens itself when the probe first calls it. A temporary name, then a rename: a process that
  // has the old library open keeps it.
  const tmp = `${lib}.tmp${process.pid}`;
  const r = await run(nvcc, ['-shared', ...gencode, ...objects, '-o', tmp]);
  if (!r.ok) {
    fs.writeFileSync(log, r.text);
    fs.rmSync(tmp, { force: true });
    fs.rmSync(lib, { force: true });
    skip(`linking ${path.relative(root, lib) || lib} failed (its output: ${shown})`);
  }
  fs.rmSync(log, { force: true });
  fs.renameSync(tmp, lib);
  fs.writeFileSync(path.join(out, 'archs.txt'), archTag + '\n');
  const s = ((Date.now() - t0) / 1000).toFixed(1);
  console.log(`mcprl: CUDA library built: ${path.relative(root, lib) || lib} for sm_${sms.join(', sm_')} ` +
    `(${todo.length} of ${sources.length} sources compiled, ${s} s)`);
}
main().catch((e) => skip(String(e && e.message ? e.message : e)));
