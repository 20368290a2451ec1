{
  # The native engine (see native/README.md). Built by `npm install` through node-gyp (native/build.cjs).
  "variables": {
    # "yes" when Debian's libopenblas-dev (cblas.h + libopenblas.so) is installed.
    "have_openblas%": "<!(node native/detect-blas.cjs)"
  },
  # The same flags for the engine's library and both addons: the test addon checks and times the very code the
  # production addon runs.
  "target_defaults": {
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions", "-fno-rtti"],
    # Node's common.gypi already passes -std=gnu++17 (C++17) and -O3 for Release, and -fPIC on Linux.
    "cflags_cc": ["-O3", "-fexceptions", "-fopenmp", "-Wall", "-Wno-unused-function"],
    "ldflags": ["-fopenmp"],
    "libraries": ["-ldl"],
    "conditions": [
      # x86-64-v3 = AVX2 + FMA + F16C: every x86 CPU since 2013-2015 runs it, unlike -march=native, which
      # would tie the binary to the build machine's exact CPU (a CI image or a container may move).
      ["target_arch=='x64'", { "cflags_cc": ["-march=x86-64-v3"] }],
      ["have_openblas=='yes'", {
        "defines": ["MCPRL_HAVE_OPENBLAS"],
        "include_dirs": ["/usr/include/x86_64-linux-gnu", "/usr/include/openblas"],
        "libraries": ["-lopenblas"]
      }]
    ]
  },
  "targets": [
    {
      # The engine, compiled once for both addons: each links the objects it needs (and so has its own copy of
      # their state: the GEMM's settings, the compute thread).
      "target_name": "mcprl_engine",
      "type": "static_library",
      "sources": [
        "native/addon/napi_util.cc",
        "native/backend/backend_cpu.cc",
        "native/backend/backend_staged.cc",
        "native/backend/cuda_loader.cc",
        "native/core/common.cc",
        "native/core/json.cc",
        "native/core/safetensors.cc",
        "native/core/weight.cc",
        "native/engine/engine_state.cc",
        "native/engine/prefix_cache.cc",
        "native/engine/sample.cc",
        "native/kernels/gemm.cc",
        "native/kernels/gemm_half.cc",
        "native/model/config.cc",
        "native/model/device.cc",
        "native/model/forward.cc",
        "native/model/load.cc",
        "native/ops/attention.cc",
        "native/ops/embedding.cc",
        "native/ops/linear.cc",
        "native/ops/lm_head.cc",
        "native/ops/rmsnorm.cc",
        "native/ops/rope.cc",
        "native/ops/swiglu.cc",
        "native/train/loss.cc",
        "native/train/optim.cc",
        "native/train/train.cc"
      ]
    },
    {
      # The production addon, build/Release/mcprl_native.node (src/engine/native.ts).
      "target_name": "mcprl_native",
      "dependencies": ["mcprl_engine"],
      "sources": [
        "native/addon/addon.cc",
        "native/addon/engine_cache.cc",
        "native/addon/engine_generate.cc",
        "native/addon/engine_model.cc",
        "native/addon/engine_score.cc",
        "native/train/train_napi.cc"
      ]
    },
    {
      # The test and bench addon, build/Release/mcprl_native_test.node (src/engine/native-testing.ts): the ops
      # alone, gradcheck, their timings; never loaded by the engine.
      "target_name": "mcprl_native_test",
      "dependencies": ["mcprl_engine"],
      "sources": ["native/testing/test_addon.cc", "native/testing/bench.cc", "native/testing/gradcheck.cc"]
    }
  ]
}
