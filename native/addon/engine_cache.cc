// Engine's cache bindings (engine.h): the prefix cache's and the KV cache's byte budgets, a slot's bytes, and both
// caches' counters (read without the engine lock: they are atomics).
#include <mutex>

#include "../core/common.h"
#include "../engine/prefix_cache.h"
#include "engine.h"
#include "napi_util.h"

namespace mcprl {

// prefixCache(capacityBytes: number): void — the prefix cache's byte budget (0: off; smaller: evicts now).
Napi::Value Engine::PrefixCacheCapacity(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    const double bytes = int_arg(info[0], "prefix cache bytes", 0, kMaxSafeInt);
    std::lock_guard<std::mutex> g(st_->mu);
    st_->prefix_cache.set_capacity((size_t)bytes);
    st_->note_kv();
    return info.Env().Undefined();
  });
}

// prefixCacheStats(): counters since load (prompts, promptTokens, hitTokens, hitBlocks, prefilledTokens,
// insertedBlocks, evictedBlocks), the cache now (blocks, bytes, capacityBytes) and blockTokens; read without
// the engine lock.
Napi::Value Engine::PrefixCacheStatsJs(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    const PrefixCacheStats& s = st_->prefix_cache.stats;  // atomics: no lock (see prefix_cache.h)
    auto o = Napi::Object::New(info.Env());
    o.Set("prompts", (double)s.prompts);
    o.Set("promptTokens", (double)s.prompt_tokens);
    o.Set("hitTokens", (double)s.hit_tokens);
    o.Set("hitBlocks", (double)s.hit_blocks);
    o.Set("prefilledTokens", (double)s.prefilled_tokens);
    o.Set("insertedBlocks", (double)s.inserted_blocks);
    o.Set("evictedBlocks", (double)s.evicted_blocks);
    o.Set("blocks", (double)s.blocks);
    o.Set("bytes", (double)s.bytes);
    o.Set("capacityBytes", (double)s.capacity_bytes);
    o.Set("blockTokens", kPrefillChunk);
    return o;
  });
}

// kvCache(budgetBytes: number): void — the KV cache's byte budget, slots and prefix cache together (EngineState);
// fails when the slots live now reserve more than it.
Napi::Value Engine::KvCacheBudget(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    const double bytes = int_arg(info[0], "KV cache bytes", 0, kMaxSafeInt);
    std::lock_guard<std::mutex> g(st_->mu);
    CHECK(st_->loaded, "model not loaded");
    st_->set_kv_budget((size_t)bytes);
    return info.Env().Undefined();
  });
}

// kvSlotBytes(capacity: number): number — the bytes a slot of that many tokens reserves (its keys and values).
Napi::Value Engine::KvSlotBytes(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    const int cap = (int)int_arg(info[0], "KV slot capacity", 1, kMaxInt);
    std::lock_guard<std::mutex> g(st_->mu);
    CHECK(st_->loaded, "model not loaded");
    return Napi::Number::New(info.Env(), (double)st_->slot_bytes(cap));
  });
}

// kvCacheStats(): { budgetBytes, reservedBytes, bytes, peakBytes, slots, peakSlots } (KvCacheStats in
// engine_state.h), read without the engine lock.
Napi::Value Engine::KvCacheStatsJs(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    const KvCacheStats& s = st_->kv_stats;
    auto o = Napi::Object::New(info.Env());
    o.Set("budgetBytes", (double)s.budget_bytes);
    o.Set("reservedBytes", (double)s.reserved_bytes);
    o.Set("bytes", (double)s.bytes);
    o.Set("peakBytes", (double)s.peak_bytes);
    o.Set("slots", (double)s.slots);
    o.Set("peakSlots", (double)s.peak_slots);
    return o;
  });
}

}  // namespace mcprl
