// Helpers of the N-API boundary, shared by the engine bindings (addon.cc, engine_*.cc) and the trainer bindings
// (train/train_napi.cc). Every C++ exception is caught here and becomes a rejected promise or a thrown JS
// Error: the Node process never aborts.
#pragma once
#include <napi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../engine/sample.h"

namespace mcprl {

// Runs `work` off the JS thread (on the process's one compute thread, queued by a libuv worker); resolves with
// `done(env)` (undefined when null) or rejects with the exception's message.
Napi::Value run_async(Napi::Env env, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done = nullptr);
// Threads that have run run_async's work since the addon loaded: 1 once any has run (the compute thread), else 0.
int task_threads();

// The GEMM of the addon that calls these (each addon links its own copy, native/kernels/gemm.h): what it reports
// (kernels, the fork guard's counters) set on `o`, and setPortableGemm(on), which switches it to the portable kernels.
void set_gemm_info(Napi::Object& o);
Napi::Value set_portable_gemm(const Napi::CallbackInfo& info);

// Wraps a synchronous method body: C++ exceptions become JS exceptions.
template <typename F>
Napi::Value guard(const Napi::CallbackInfo& info, F f) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Napi::Error::New(info.Env(), e.what());
  }
}

// Typed-array arguments, copied; a TypeError naming `what` when v has another type.
std::vector<int32_t> to_i32(const Napi::Value& v, const char* what);
std::vector<float> to_f32(const Napi::Value& v, const char* what);
// An array of string|null (null -> "").
std::vector<std::string> to_names(const Napi::Value& v, const char* what);

// Scalar arguments and fields of option objects. Native code has no defaults of its own: every value is
// required, and a missing one or one of another type is a TypeError naming it (`what`, e.g. "optim.lr");
// an integer out of [lo, hi] (or not an integer) is a RangeError, so 1e12 never wraps through an int cast.
constexpr int64_t kMaxInt = 2147483647;            // sizes and ids stored as int
constexpr int64_t kMaxSafeInt = (int64_t)1 << 53;  // JavaScript's Number.MAX_SAFE_INTEGER + 1
constexpr int64_t kMaxRank = 1 << 16;              // LoRA rank
constexpr int64_t kMaxThreads = 1 << 16;
std::string str_arg(const Napi::Value& v, const std::string& what);
bool bool_arg(const Napi::Value& v, const std::string& what);
double num_arg(const Napi::Value& v, const std::string& what);  // finite
int64_t int_arg(const Napi::Value& v, const std::string& what, int64_t lo, int64_t hi);
Napi::Object obj_arg(const Napi::Value& v, const std::string& what);
// The same for o[key], named what + "." + key.
std::string str_field(const Napi::Object& o, const std::string& what, const char* key);
bool bool_field(const Napi::Object& o, const std::string& what, const char* key);
double num_field(const Napi::Object& o, const std::string& what, const char* key);
int64_t int_field(const Napi::Object& o, const std::string& what, const char* key, int64_t lo, int64_t hi);

// Allowed-token sets (sample.h): maskIdx (Int32Array) and masks (Uint32Array), both null/undefined for none.
TokenMasks to_masks(const Napi::Value& idx, const Napi::Value& bits, const std::string& what);

Napi::Float32Array f32_array(Napi::Env env, const std::vector<float>& v);
Napi::Int32Array i32_array(Napi::Env env, const std::vector<int32_t>& v);

}  // namespace mcprl
