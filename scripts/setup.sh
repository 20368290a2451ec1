#!/usr/bin/env bash
# Set-up for a fresh Debian/Ubuntu machine: everything `npm test` needs, then the project's dependencies.
#   - libopenblas-dev: the native engine's fast GEMM (found when the addon is built);
#   - nlohmann-json3-dev: JSON in the native engine;
#   - python3-torch, python3-onnx, python3-jinja2: the oracles the tests compare against (/usr/bin/python3);
#   - npm ci: installs the packages, builds the native addon (and the CUDA library when nvcc is on the PATH: one
#     line when not, or when its compile fails; MCPRL_CUDA_LIB=skip builds none), compiles TypeScript.
# Without apt-get (another OS) it says which packages to install and goes on with npm ci.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(libopenblas-dev nlohmann-json3-dev python3-torch python3-onnx python3-jinja2)
if command -v apt-get >/dev/null 2>&1; then
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" apt-get install -y -qq "${PACKAGES[@]}" >/dev/null
else
  echo "setup: no apt-get here; install the equivalents of: ${PACKAGES[*]}" >&2
fi

# package.json's allowScripts keeps onnxruntime-node's install script (a CUDA download) from running; npm
# versions older than that field skip it by this variable instead. Its CPU binaries ship in the package.
export ONNXRUNTIME_NODE_INSTALL=skip
npm ci
