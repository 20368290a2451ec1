// What one loaded model owns on the native side, shared by the engine bindings (addon/engine_*.cc) and the trainer
// bindings (train/train_napi.cc): the trainer's adapter is an ordinary entry of `adapters`, so generation and
// scoring use it under its name with no reload.
#pragma once
#include <napi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../model/model.h"
#include "prefix_cache.h"
#include "sample.h"

namespace mcprl {

// The KV cache's counters (src/engine/kv-cache.ts: KvCacheStats). Atomic so that they can be read without the
// engine's lock, as the prefix cache's are.
struct KvCacheStats {
  std::atomic<uint64_t> budget_bytes{0};    // the budget (0: none set)
  std::atomic<uint64_t> reserved_bytes{0};  // every live slot's keys and values at its full capacity
  std::atomic<uint64_t> bytes{0};           // slots' caches allocated now plus the prefix cache's blocks
  std::atomic<uint64_t> peak_bytes{0};      // the most `bytes` has been since load
  std::atomic<uint64_t> slots{0};           // slots whose cache is allocated now
  std::atomic<uint64_t> peak_slots{0};
};

// Score's arrays in the backend's memory when it is not the host's (grown on demand, reused).
struct ScoreStage {
  FloatBuffer lp, lse, scratch, inv_temp;
  IntBuffer targets, mask_idx;
  MaskBuffer masks;
};

// Held by shared_ptr: in-flight workers keep it alive, so close() cannot free it under them.
struct EngineState {
  std::mutex mu;  // one task at a time; the TS side also serialises calls
  bool loaded = false, closed = false;
  int threads = 0;
  Model model;
  std::map<std::string, std::unique_ptr<LoraAdapter>> adapters;
  std::map<int, std::unique_ptr<KVSlot>> slots;
  std::map<int, int> slot_caps;  // requested capacity of slots not yet allocated
  // The KV cache's byte budget (src/engine/model.ts sets it at load): a slot reserves the keys and values of its
  // whole capacity when it is created, before its cache is allocated, and the prefix cache gets only the room the
  // reservations leave (PrefixCache::set_limit), so slots and prefix blocks together stay within it. The
  // scheduler admits a sequence only when its reservation fits; a creation past the budget fails here regardless.
  size_t kv_budget = SIZE_MAX;
  size_t kv_reserved = 0;   // bytes reserved by live slots
  size_t kv_allocated = 0;  // bytes of the slots' caches allocated now
  KvCacheStats kv_stats;
  int next_slot = 1;
  RunState rs;
  PrefixCache prefix_cache;  // KV of earlier prompts' chunks (prefix_cache.h); its budget is set by src/engine/model.ts
  std::vector<float> logits;  // (B, V) sampling scratch
  // Elsewhere than the host: the slots' last hidden rows go there, their logits come back into `logits`.
  FloatBuffer stage_h, stage_logits;
  ScoreStage score_stage;
  // (B)(V) each row's candidate ids while sampling. Kept across calls: allocated afresh per token, these
  // vocabulary-sized rows were made on OpenMP threads and freed on this one, and a serving process's resident
  // memory crept up with the holes they left in glibc's per-thread arenas (issue 12 §3, bench/serve-rss.bench.ts).
  std::vector<std::vector<int>> sample_idx;

  // Fails when closed; applies this engine's thread count. Call with mu held, before any work.
  void begin();
  // null for "" (the base model); fails for an unknown name.
  const LoraAdapter* adapter(const std::string& name);
  // Drops the prefix cache's blocks of adapters unloaded, replaced or trained since (their weights version).
  void purge_stale_prefixes();
  // The slot with this id, allocating its cache on first use.
  KVSlot& slot(int id);
  // Bytes of a slot's keys and values at capacity cap: 2 x layers x cap x kv_heads x head_dim x sizeof(float).
  size_t slot_bytes(int cap) const;
  // A new slot of capacity cap, its bytes reserved; fails, naming the bytes, when they do not fit the budget.
  int create_slot(int cap);
  // Frees a slot's cache and reservation (an unknown id: nothing).
  void free_slot(int id);
  // A new budget: fails when live reservations exceed it; the prefix cache shrinks to the room left.
  void set_kv_budget(size_t bytes);
  // Brings the counters up to date after slots or prefix blocks changed.
  void note_kv();
  // Logits of each slot's last hidden state, then one sampled token per slot, drawn from its allowed set when
  // sp.masks gives one; lp and slp are the two log-probabilities of sample.h. sp.top_logprobs[i] alternatives of
  // slot i go to row i of top_ids / top_lps, (B, W) with W = the largest of them; unused entries are -1 and 0.
  void sample(const std::vector<int32_t>& ids, const BatchSampling& sp, std::vector<int32_t>& tok, std::vector<float>& lp, std::vector<float>& slp, int& width,
              std::vector<int32_t>& top_ids, std::vector<float>& top_lps);
};

// The state behind a JS Engine object (a TypeError when v is not one).
std::shared_ptr<EngineState> engine_state_of(const Napi::Value& v);

}  // namespace mcprl
