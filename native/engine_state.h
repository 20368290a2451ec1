// What one loaded model owns on the native side, shared by the engine bindings (addon.cc) and the trainer
// bindings (train/train_napi.cc): the trainer's adapter is an ordinary entry of `adapters`, so generation and
// scoring use it under its name with no reload.
#pragma once
#include <napi.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model.h"
#include "prefix_cache.h"
#include "sample.h"

namespace mcprl {

// Held by shared_ptr: in-flight workers keep it alive, so close() cannot free it under them.
struct EngineState {
  std::mutex mu;  // one task at a time; the TS side also serialises calls
  bool loaded = false, closed = false;
  int threads = 0;
  Model model;
  std::map<std::string, std::unique_ptr<LoraAdapter>> adapters;
  std::map<int, std::unique_ptr<KVSlot>> slots;
  std::map<int, int> slot_caps;  // requested capacity of slots not yet allocated
  int next_slot = 1;
  RunState rs;
  PrefixCache prefix_cache;  // KV of earlier prompts' chunks (prefix_cache.h); its budget is set by src/engine/model.ts
  std::vector<float> logits;  // (B, V) sampling scratch
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
  // Logits of each slot's last hidden state, then one sampled token per slot, drawn from its allowed set when
  // masks gives one; lp and slp are the two log-probabilities of sample.h. top_n[i] alternatives of slot i go to
  // row i of top_ids / top_lps, (B, W) with W = max(top_n); unused entries are -1 and 0.
  void sample(const std::vector<int32_t>& ids, const std::vector<float>& temps, const std::vector<float>& top_p,
              const std::vector<int32_t>& top_k, const std::vector<int32_t>& top_n, const TokenMasks& masks,
              std::vector<int32_t>& tok, std::vector<float>& lp, std::vector<float>& slp, int& width,
              std::vector<int32_t>& top_ids, std::vector<float>& top_lps);
};

// The state behind a JS Engine object (a TypeError when v is not one).
std::shared_ptr<EngineState> engine_state_of(const Napi::Value& v);

}  // namespace mcprl
