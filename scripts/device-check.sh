#!/usr/bin/env bash
# The CUDA backend's device check, as ONE command for the GPU machine (issue 17):
#   run: bash scripts/device-check.sh         (through the device tool; its $OUT receives the logs)
# 1. builds native/cuda with nvcc for sm_90 (native/cuda/build.sh), after finding cuBLAS in PyTorch's pip
#    install (MCPRL_CUBLAS_DIR, unless already set);
# 2. runs the check executable: every op CPU vs CUDA, GEMM paths and rates (one JSON line per figure), and
#    dumps the inputs and outputs of the marked cases;
# 3. runs scripts/device-check.py: the same cases recomputed with PyTorch on the GPU in float64 (the second
#    oracle), and torch.matmul's bf16 rate as the peer;
# 4. the engine's model and trainer on the CUDA backend (mcprl-cuda-model-check, scripts/device-model-check.py):
#    log-probabilities and LoRA gradients of a random Qwen3-shaped folder with a PEFT adapter against
#    transformers + peft in float64, then benchmarks at Qwen3-0.6B and -4B shapes (LoRA GRPO step at 4096 packed
#    tokens, decode at batch 1 and 64) beside PyTorch + peft;
# 5. prints the whole run's seconds.
# Every line on stdout is one JSON object. Dry mode (--cpu-only, or no GPU found): builds, skips the GPU runs,
# meets the PyTorch oracle (on the CPU) with the CPU ops on small dumped cases when torch can be imported, and
# prints one line saying so; exit 0 when all that succeeded. Exit status otherwise: 0 every check ok.
# Environment: MCPRL_CUDA_BUILD (build folder, default a temp dir), MCPRL_CHECK_ARGS (extra check arguments,
# e.g. --quick), MCPRL_COMMIT (the commit to print), MCPRL_PYTHON (the interpreter with torch; default
# python3), OUT (where logs go; default: the build folder), MCPRL_JSON_INCLUDE (a folder holding
# nlohmann/json.hpp, which the model check needs and the GPU machine lacks: carry a copy), MCPRL_MODEL_BENCH
# (shapes to benchmark, default "0.6b 4b"; "none" skips the benchmarks).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
t0=$(date +%s.%N)
cpu_only=0
for a in "$@"; do
  case $a in
    --cpu-only) cpu_only=1 ;;
    *) echo "{\"figure\":\"device-check\",\"ok\":false,\"error\":\"unknown argument $a (only --cpu-only)\"}"; exit 64 ;;
  esac
done
build=${MCPRL_CUDA_BUILD:-$(mktemp -d /tmp/mcprl-cuda.XXXXXX)}
logs=${OUT:-$build}
mkdir -p "$build" "$logs"
elapsed() { echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}'; }
# The commit the lines belong to: MCPRL_COMMIT from the caller (the device machine's copy of the tree may carry
# no .git), else git's answer here.
commit=${MCPRL_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}

if ! command -v "${NVCC:-nvcc}" >/dev/null; then
  echo "{\"figure\":\"device-check\",\"ok\":false,\"error\":\"nvcc not found: the CUDA check needs CUDA's compiler on the PATH\"}"
  exit 1
fi
py=${MCPRL_PYTHON:-python3}
if [ -z "${MCPRL_CUBLAS_DIR:-}" ] && command -v "$py" >/dev/null; then
  d=$("$py" "$root/scripts/device-check.py" --cublas-dir 2>/dev/null) && [ -n "$d" ] && export MCPRL_CUBLAS_DIR=$d
fi
if ! bash "$root/native/cuda/build.sh" "$build" >"$logs/build.log" 2>&1; then
  echo "{\"figure\":\"device-check.build\",\"ok\":false,\"seconds\":$(elapsed),\"log\":\"$logs/build.log\"}"
  tail -n 40 "$logs/build.log" >&2
  exit 1
fi
echo "{\"figure\":\"device-check.build\",\"ok\":true,\"seconds\":$(elapsed),\"commit\":\"$commit\",\"cublas_dir\":\"${MCPRL_CUBLAS_DIR:-}\"}"

have_torch() { command -v "$py" >/dev/null && "$py" -c 'import torch, numpy' 2>/dev/null; }
gpu=0
if [ $cpu_only = 0 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
if [ $gpu = 0 ]; then
  why=$([ $cpu_only = 1 ] && echo "--cpu-only" || echo "no GPU found (nvidia-smi -L)")
  # Without a GPU the PyTorch oracle still meets the CPU ops on the dumped cases (quick shapes): the formulas
  # the device run relies on are checked here, where torch runs on the CPU.
  oracle="not run: $py cannot import torch and numpy (MCPRL_PYTHON)"
  if have_torch; then
    rm -rf "$build/dump-cpu"
    if ! "$build/mcprl-cuda-check" --cpu-dump "$build/dump-cpu" ||
      ! "$py" "$root/scripts/device-check.py" --dump "$build/dump-cpu"; then
      echo "{\"figure\":\"device-check\",\"ok\":false,\"mode\":\"dry\",\"error\":\"the CPU-only dump or its PyTorch comparison failed (lines above)\"}"
      exit 1
    fi
    oracle="PyTorch oracle vs CPU ops ok"
  fi
  if [ -x "$build/mcprl-cuda-model-check" ]; then
    if ! "$build/mcprl-cuda-model-check" staged "$root/fixtures/models/tiny-bookshop"; then
      echo "{\"figure\":\"device-check\",\"ok\":false,\"mode\":\"dry\",\"error\":\"the model check's staged run failed (line above)\"}"
      exit 1
    fi
    oracle="$oracle; model check staged ok"
  fi
  echo "{\"figure\":\"device-check\",\"ok\":true,\"mode\":\"dry\",\"note\":\"built $build/mcprl-cuda-check for sm_90; GPU runs skipped: $why; $oracle\"}"
  exit 0
fi

dump="$build/dump"
rm -rf "$dump"
# shellcheck disable=SC2086  # MCPRL_CHECK_ARGS is a list of words
# Time limits inside the device call's own (480 s): a kernel that hangs still leaves the oracle and the logs.
timeout 300 "$build/mcprl-cuda-check" --dump "$dump" ${MCPRL_CHECK_ARGS:-} | tee "$logs/check.jsonl"
rc_check=${PIPESTATUS[0]}
[ "$rc_check" = 124 ] && echo "{\"figure\":\"cuda.check\",\"ok\":false,\"error\":\"timed out after 300 s (a kernel may hang)\"}"
rc_torch=0
if have_torch; then
  PYTHONUNBUFFERED=1 timeout 120 "$py" "$root/scripts/device-check.py" --dump "$dump" | tee "$logs/torch.jsonl"
  rc_torch=${PIPESTATUS[0]}
else
  echo "{\"figure\":\"torch\",\"ok\":false,\"error\":\"$py cannot import torch and numpy: the PyTorch oracle did not run\"}"
  rc_torch=1
fi
# The engine's model and trainer on the device: parity with transformers + peft, then the benchmarks.
rc_model=0
if [ ! -x "$build/mcprl-cuda-model-check" ]; then
  echo "{\"figure\":\"cuda.model\",\"ok\":false,\"error\":\"mcprl-cuda-model-check was not built (nlohmann/json.hpp: set MCPRL_JSON_INCLUDE; see build.log)\"}"
  rc_model=1
elif have_torch; then
  par="$build/parity"
  rm -rf "$par"
  export PYTHONUNBUFFERED=1
  { timeout 120 "$py" "$root/scripts/device-model-check.py" prepare "$par" &&
    timeout 120 "$build/mcprl-cuda-model-check" parity "$par" &&
    timeout 180 "$py" "$root/scripts/device-model-check.py" compare "$par"; } 2>>"$logs/model.log" | tee "$logs/model.jsonl"
  rc_model=${PIPESTATUS[0]}
  shapes=${MCPRL_MODEL_BENCH:-0.6b 4b}
  if [ "$shapes" != none ]; then
    (r=0; for s in $shapes; do timeout 240 "$build/mcprl-cuda-model-check" bench "$s" 2>>"$logs/model.log" || r=1; done
      exit $r) | tee "$logs/bench.jsonl"
    [ "${PIPESTATUS[0]}" = 0 ] || rc_model=1
    timeout 240 "$py" "$root/scripts/device-model-check.py" peer "$logs/bench.jsonl" 2>>"$logs/model.log" | tee -a "$logs/bench.jsonl"
    [ "${PIPESTATUS[0]}" = 0 ] || rc_model=1
  fi
  tail -n 20 "$logs/model.log" >&2
else
  rc_model=1
fi
ok=$([ $rc_check = 0 ] && [ $rc_torch = 0 ] && [ $rc_model = 0 ] && echo true || echo false)
echo "{\"figure\":\"device-check\",\"ok\":$ok,\"seconds\":$(elapsed),\"commit\":\"$commit\",\"check_rc\":$rc_check,\"torch_rc\":$rc_torch,\"model_rc\":$rc_model}"
[ "$ok" = true ]
