// The bindings of the test and bench addon (build/Release/mcprl_native_test.node): the ops alone, their
// finite-difference checks and their timings, which the production addon (addon/addon.cc) leaves out. Built with it
// by native/build.cjs from the same static library of the engine, so it has its own copy of the GEMM's settings
// (setPortableGemm, info). Loaded by tests and benches only, through src/engine/native-testing.ts.
#pragma once
#include <napi.h>

namespace mcprl {

// The attention op's shape arguments info[at .. at + 2] (H, Hkv, D), checked.
struct AttnShape {
  int H, Hkv, D;
};
AttnShape attn_shape(const Napi::CallbackInfo& info, int at);

// bench.cc: single-threaded CPU seconds or GFLOP/s, for bench/*.bench.ts.
Napi::Value GemmBench(const Napi::CallbackInfo& info);
Napi::Value AttentionBench(const Napi::CallbackInfo& info);
Napi::Value LmHeadBench(const Napi::CallbackInfo& info);

}  // namespace mcprl
