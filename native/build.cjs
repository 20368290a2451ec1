// `npm install` runs this (package.json "install"): node-gyp configure + build of the native addons (binding.gyp:
// build/Release/mcprl_native.node, the engine, and mcprl_native_test.node, the tests' and benches' bindings).
// Not `rebuild`: that first deletes build/, so every build would briefly remove the addon from under other
// processes using this checkout; configure + build is incremental and replaces the .node file at the end.
// It passes --nodedir when this Node installation ships its own headers (Debian's /usr/include/node,
// nvm, the official tarballs), because node-gyp otherwise downloads headers from nodejs.org, which
// fails on offline machines such as CI here. Compiles with all cores (-j max).
// Then the CUDA library (native/cuda/build-lib.cjs) when nvcc is on the PATH: loaded lazily by the addon, only
// for --device cuda|auto; it never fails the install (a missing nvcc or a failed compile is one line).
// The one build requirement beyond a C++ compiler: Debian's nlohmann-json3-dev (the JSON parser of the
// safetensors reader); without it the build stops here with one line saying how to install it.
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const jsonHeaders = ['/usr/include/nlohmann/json.hpp', '/usr/local/include/nlohmann/json.hpp'];
if (!jsonHeaders.some((h) => fs.existsSync(h))) {
  console.error('mcprl: nlohmann/json.hpp not found: apt-get install nlohmann-json3-dev');
  process.exit(1);
}

const prefix = path.resolve(process.execPath, '..', '..');
const haveHeaders = ['node_api.h', 'common.gypi'].every((f) => fs.existsSync(path.join(prefix, 'include', 'node', f)));
const candidates = [
  process.env.npm_config_node_gyp,
  path.join(prefix, 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
].filter(Boolean);
const gyp = candidates.find((p) => fs.existsSync(p));
if (!gyp) {
  console.error('mcprl: node-gyp not found (looked in npm_config_node_gyp and npm\'s bundled copy)');
  process.exit(1);
}
const common = [...(haveHeaders ? [`--nodedir=${prefix}`] : []), ...process.argv.slice(2)];
for (const cmd of [['configure', ...common], ['build', '-j', 'max', ...common]]) {
  const r = spawnSync(process.execPath, [gyp, ...cmd], { stdio: 'inherit', cwd: path.resolve(__dirname, '..') });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
// The CUDA library, after the addon: its own script, so that its failure, whatever it is, leaves the CPU install.
const cuda = spawnSync(process.execPath, [path.join(__dirname, 'cuda', 'build-lib.cjs')], { stdio: 'inherit', cwd: path.resolve(__dirname, '..') });
if (cuda.status !== 0) console.log(`mcprl: CUDA library not built: native/cuda/build-lib.cjs exited with ${cuda.status ?? cuda.signal}`);
