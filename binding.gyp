{
  # The native engine (see native/README.md). Built by `npm install` through node-gyp.
  "variables": {
    # "yes" when Debian's libopenblas-dev (cblas.h + libopenblas.so) is installed.
    "have_openblas%": "<!(node native/detect-blas.cjs)"
  },
  "targets": [
    {
      "target_name": "mcprl_native",
      "sources": [
        "native/addon.cc",
        "native/cuda_loader.cc",
        "native/napi_util.cc",
        "native/common.cc",
        "native/gemm.cc",
        "native/gemm_half.cc",
        "native/weight.cc",
        "native/backend_cpu.cc",
        "native/backend_staged.cc",
        "native/gradcheck.cc",
        "native/json.cc",
        "native/safetensors.cc",
        "native/model/config.cc",
        "native/model/load.cc",
        "native/model/forward.cc",
        "native/model/device.cc",
        "native/sample.cc",
        "native/prefix_cache.cc",
        "native/ops/embedding.cc",
        "native/ops/rmsnorm.cc",
        "native/ops/rope.cc",
        "native/ops/attention.cc",
        "native/ops/swiglu.cc",
        "native/ops/linear.cc",
        "native/ops/lm_head.cc",
        "native/train/loss.cc",
        "native/train/optim.cc",
        "native/train/train.cc",
        "native/train/train_napi.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti"],
      # Node's common.gypi already passes -std=gnu++17 (C++17) and -O3 for Release.
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
    }
  ]
}
