// The JS class Engine (src/engine/native.ts): one loaded model, its adapters and KV slots (EngineState). Its
// bindings by concern: engine_model.cc (load, adapters, weights, backend, close), engine_score.cc (score),
// engine_generate.cc (KV slots, fork, prefill, sample, step), engine_cache.cc (the KV and prefix caches' budgets and
// counters); addon.cc names them for JS (Engine::Init). Every binding returns or throws synchronously, or returns a
// Promise whose work runs on the compute thread (run_async, napi_util.h).
#pragma once
#include <napi.h>

#include <memory>

#include "../engine/engine_state.h"

namespace mcprl {

class Engine : public Napi::ObjectWrap<Engine> {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit Engine(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Engine>(info), st_(std::make_shared<EngineState>()) {}
  // Shared with the training bindings (train/train_napi.cc) so they use the same model, adapters and mutex.
  std::shared_ptr<EngineState> state() const { return st_; }

 private:
  std::shared_ptr<EngineState> st_;

  // engine_model.cc
  Napi::Value Load(const Napi::CallbackInfo& info);
  Napi::Value LoadAdapter(const Napi::CallbackInfo& info);
  Napi::Value UnloadAdapter(const Napi::CallbackInfo& info);
  Napi::Value WeightBytes(const Napi::CallbackInfo& info);
  Napi::Value BackendName(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  // engine_score.cc
  Napi::Value Score(const Napi::CallbackInfo& info);
  // engine_generate.cc
  Napi::Value SlotCreate(const Napi::CallbackInfo& info);
  Napi::Value SlotFree(const Napi::CallbackInfo& info);
  Napi::Value SlotSeed(const Napi::CallbackInfo& info);
  Napi::Value Fork(const Napi::CallbackInfo& info);
  Napi::Value Prefill(const Napi::CallbackInfo& info);
  Napi::Value Sample(const Napi::CallbackInfo& info);
  Napi::Value Step(const Napi::CallbackInfo& info);
  // engine_cache.cc
  Napi::Value PrefixCacheCapacity(const Napi::CallbackInfo& info);
  Napi::Value PrefixCacheStatsJs(const Napi::CallbackInfo& info);
  Napi::Value KvCacheBudget(const Napi::CallbackInfo& info);
  Napi::Value KvSlotBytes(const Napi::CallbackInfo& info);
  Napi::Value KvCacheStatsJs(const Napi::CallbackInfo& info);
};

}  // namespace mcprl
