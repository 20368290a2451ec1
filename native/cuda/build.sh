#!/usr/bin/env bash
# Builds the CUDA backend's standalone check: every native/cuda/*.cu for sm_90 with nvcc, plus the CPU ops it
# compares against (native/ops/*.cc and what they need: gemm, 16-bit weights, AdamW), into OUT/mcprl-cuda-check.
# No Node, no N-API, no nlohmann-json (the GPU machine has none of them).
#   native/cuda/build.sh OUT        (JOBS=n parallel compiles, default: all cores; NVCC, CXX override the tools)
set -euo pipefail
out=${1:?usage: native/cuda/build.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
NVCC=${NVCC:-nvcc}
CXX=${CXX:-g++}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$out/obj"
# -arch=sm_90: Hopper machine code (H100/H200), no PTX for older targets to JIT from.
nvflags=(-arch=sm_90 -std=c++17 -O3 -Xcompiler -fopenmp)
cxxflags=(-std=c++17 -O3 -fopenmp -Wall -Wno-unused-function)
[ "$(uname -m)" = x86_64 ] && cxxflags+=(-march=x86-64-v3)  # as binding.gyp builds the CPU ops
cpu_src=("$root"/native/ops/*.cc "$root"/native/gemm.cc "$root"/native/gemm_half.cc "$root"/native/weight.cc
  "$root"/native/common.cc "$root"/native/train/optim.cc)
cu_src=("$root"/native/cuda/*.cu)
compile() {  # one source -> one object named after its path
  local src=$1 obj
  obj="$out/obj/$(echo "${src#"$root"/}" | tr / _).o"
  case $src in
    *.cu) "$NVCC" "${nvflags[@]}" -c "$src" -o "$obj" ;;
    *) "$CXX" "${cxxflags[@]}" -c "$src" -o "$obj" ;;
  esac
}
export -f compile
export root out NVCC CXX
export nvflags_s="${nvflags[*]}" cxxflags_s="${cxxflags[*]}"
# xargs runs compile in fresh shells: pass the flag arrays as strings and rebuild them there.
printf '%s\n' "${cu_src[@]}" "${cpu_src[@]}" |
  xargs -P "$JOBS" -I{} bash -c 'nvflags=($nvflags_s); cxxflags=($cxxflags_s); compile "$1"' _ {}
"$NVCC" -arch=sm_90 "$out"/obj/*.o -Xcompiler -fopenmp -lgomp -ldl -o "$out/mcprl-cuda-check"
echo "built $out/mcprl-cuda-check"
