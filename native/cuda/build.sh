#!/usr/bin/env bash
# Builds the CUDA backend's standalone checks (no Node, no N-API):
#   OUT/mcprl-cuda-check        every native/cuda op against the CPU op it mirrors (check/check_*.cu), with the CPU
#                               ops (native/ops/*.cc and what they need: gemm, 16-bit weights, AdamW);
#   OUT/mcprl-cuda-model-check  the engine's model and trainer (native/model, native/train) on the CUDA backend
#                               (check/model_*.cu); it reads safetensors, hence needs nlohmann/json.hpp: from
#                               MCPRL_JSON_INCLUDE (a folder holding nlohmann/) or the system's; without it this
#                               one is skipped with a line saying so.
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
cpu_src=("$root"/native/ops/*.cc "$root"/native/kernels/gemm.cc "$root"/native/kernels/gemm_half.cc "$root"/native/core/weight.cc
  "$root"/native/core/common.cc "$root"/native/train/optim.cc)
model_src=("$root"/native/model/*.cc "$root"/native/core/safetensors.cc "$root"/native/core/json.cc "$root"/native/backend/backend_cpu.cc
  "$root"/native/train/train.cc "$root"/native/train/loss.cc)
cu_src=("$root"/native/cuda/*.cu)  # the kernels and the backend (the library's sources)
check_src=("$root"/native/cuda/check/check_*.cu)
model_check_src=("$root"/native/cuda/check/model_*.cu)
json_inc=${MCPRL_JSON_INCLUDE:-}
have_json=0
if [ -n "$json_inc" ] && [ -f "$json_inc/nlohmann/json.hpp" ]; then
  have_json=1
  nvflags+=(-I"$json_inc")
  cxxflags+=(-I"$json_inc")
elif printf '#include <nlohmann/json.hpp>\n' | "$CXX" -std=c++17 -fsyntax-only -x c++ - 2>/dev/null; then
  have_json=1
fi
if [ $have_json = 0 ]; then  # the model check's sources need the JSON header: leave them out
  model_src=()
  model_check_src=()
fi
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
rm -f "$out"/obj/*.o
compile_all() { grep . | xargs -P "$JOBS" -I{} bash -c 'nvflags=($nvflags_s); cxxflags=($cxxflags_s); compile "$1"' _ {}; }
printf '%s\n' "${cu_src[@]}" "${check_src[@]}" "${cpu_src[@]}" | compile_all
# The model check's own sources: a failure there leaves the op check built (and says so below).
if [ $have_json = 1 ] && ! printf '%s\n' "${model_src[@]}" "${model_check_src[@]}" | compile_all; then
  have_json=0
  echo "mcprl-cuda-model-check: its sources did not compile (above)" >&2
fi
objs() { for s in "$@"; do echo "$out/obj/$(echo "${s#"$root"/}" | tr / _).o"; done; }
mapfile -t common_o < <(objs "${cpu_src[@]}" "${cu_src[@]}")
mapfile -t check_o < <(objs "${check_src[@]}")
"$NVCC" -arch=sm_90 "${common_o[@]}" "${check_o[@]}" -Xcompiler -fopenmp -lgomp -ldl -o "$out/mcprl-cuda-check"
echo "built $out/mcprl-cuda-check"
if [ $have_json = 1 ]; then
  mapfile -t model_o < <(objs "${model_src[@]}" "${model_check_src[@]}")
  "$NVCC" -arch=sm_90 "${common_o[@]}" "${model_o[@]}" -Xcompiler -fopenmp \
    -lgomp -ldl -o "$out/mcprl-cuda-model-check"
  echo "built $out/mcprl-cuda-model-check"
else
  echo "skipped $out/mcprl-cuda-model-check: nlohmann/json.hpp not found (set MCPRL_JSON_INCLUDE) or its sources failed"
fi
