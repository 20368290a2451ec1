// N-API boundary of the engine, the production addon's entry point: the Engine class's JS names (its bindings are
// in engine_*.cc, engine.h), setPortableGemm, info, cudaProbe; the trainer's bindings are in train/train_napi.cc.
// The ops alone, gradcheck and the benchmarks are in the test addon (testing/test_addon.cc). Every call either
// returns/throws synchronously (cheap bookkeeping) or returns a Promise whose work runs off the JS thread, on the
// process's compute thread (run_async). Every C++ exception is caught and becomes a rejected promise or a thrown
// JS Error: the Node process never aborts.
#include <napi.h>

#include <memory>

#include "../backend/backend.h"
#include "../backend/cuda_loader.h"
#include "../core/common.h"
#include "../kernels/gemm.h"
#include "../model/model.h"
#include "../train/train_napi.h"
#include "engine.h"
#include "napi_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mcprl {

Napi::Function Engine::Init(Napi::Env env) {
  return DefineClass(env, "Engine",
                     {InstanceMethod("load", &Engine::Load), InstanceMethod("loadAdapter", &Engine::LoadAdapter),
                      InstanceMethod("unloadAdapter", &Engine::UnloadAdapter), InstanceMethod("score", &Engine::Score),
                      InstanceMethod("slotCreate", &Engine::SlotCreate), InstanceMethod("slotFree", &Engine::SlotFree),
                      InstanceMethod("slotSeed", &Engine::SlotSeed), InstanceMethod("fork", &Engine::Fork),
                      InstanceMethod("prefill", &Engine::Prefill), InstanceMethod("sample", &Engine::Sample),
                      InstanceMethod("step", &Engine::Step), InstanceMethod("close", &Engine::Close),
                      InstanceMethod("weightBytes", &Engine::WeightBytes),
                      InstanceMethod("prefixCache", &Engine::PrefixCacheCapacity),
                      InstanceMethod("prefixCacheStats", &Engine::PrefixCacheStatsJs),
                      InstanceMethod("kvCache", &Engine::KvCacheBudget), InstanceMethod("kvSlotBytes", &Engine::KvSlotBytes),
                      InstanceMethod("kvCacheStats", &Engine::KvCacheStatsJs),
                      InstanceMethod("backend", &Engine::BackendName)});
}

namespace {

Napi::Value Info(const Napi::CallbackInfo& info) {
  auto o = Napi::Object::New(info.Env());
  set_gemm_info(o);
  o.Set("backend", cpu_backend().name);
  o.Set("taskThreads", task_threads());
#ifdef _OPENMP
  o.Set("maxThreads", omp_get_num_procs());
#else
  o.Set("maxThreads", 1);
#endif
  return o;
}

// cudaProbe(path): loads the CUDA library at `path` (lazily: the first call in the process) and says what it found.
// Never throws for a missing library, driver or device: src/engine/device.ts words the line the user reads.
Napi::Value CudaProbe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "cudaProbe: expected the library's path");
  const CudaLibrary lib = cuda_library(info[0].As<Napi::String>().Utf8Value());
  auto o = Napi::Object::New(env);
  o.Set("loaded", lib.loaded);
  if (!lib.loaded) {
    o.Set("error", lib.error);
    return o;
  }
  const McprlCudaProbe& p = lib.probe;
  static const char* kStatus[] = {"ok", "no-driver", "no-device", "error"};
  o.Set("archs", lib.archs);
  o.Set("status", kStatus[p.status >= 0 && p.status <= 3 ? p.status : 3]);
  o.Set("error", std::string(p.error));
  o.Set("driverVersion", p.driver_version);
  o.Set("runtimeVersion", p.runtime_version);
  o.Set("deviceCount", p.device_count);
  o.Set("name", std::string(p.name));
  o.Set("computeCapability", p.cc_major * 10 + p.cc_minor);
  o.Set("freeBytes", (double)p.free_bytes);
  o.Set("totalBytes", (double)p.total_bytes);
  return o;
}

Napi::Object InitAll(Napi::Env env, Napi::Object exports) {
  Napi::Function engine = Engine::Init(env);
  // Per environment (each worker thread loads the addon again), for engine_state_of's type check.
  env.SetInstanceData(new Napi::FunctionReference(Napi::Persistent(engine)));
  exports.Set("Engine", engine);
  exports.Set("setPortableGemm", Napi::Function::New(env, set_portable_gemm));
  exports.Set("info", Napi::Function::New(env, Info));
  exports.Set("cudaProbe", Napi::Function::New(env, CudaProbe));
  init_train(env, exports);
  return exports;
}

}  // namespace

std::shared_ptr<EngineState> engine_state_of(const Napi::Value& v) {
  auto* ctor = v.Env().GetInstanceData<Napi::FunctionReference>();
  if (!v.IsObject() || !ctor || !v.As<Napi::Object>().InstanceOf(ctor->Value()))
    throw Napi::TypeError::New(v.Env(), "expected an Engine");
  return Engine::Unwrap(v.As<Napi::Object>())->state();
}

}  // namespace mcprl

static Napi::Object Init(Napi::Env env, Napi::Object exports) { return mcprl::InitAll(env, exports); }

NODE_API_MODULE(mcprl_native, Init)
