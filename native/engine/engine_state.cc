// EngineState's bookkeeping (engine_state.h): adapters by name, KV slots under the cache's byte budget, and the
// sampling of each slot's next token.
#include "engine_state.h"

#include <algorithm>
#include <string>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../kernels/gemm.h"

namespace mcprl {

void EngineState::begin() {
  if (closed) FAIL("engine is closed");
  set_threads(threads);
}

const LoraAdapter* EngineState::adapter(const std::string& name) {
  if (name.empty()) return nullptr;
  auto it = adapters.find(name);
  if (it == adapters.end()) FAIL("unknown adapter '" + name + "'");
  return it->second.get();
}

void EngineState::purge_stale_prefixes() {
  prefix_cache.purge_stale([this](const AdapterKey& k) {
    if (k.first.empty()) return true;
    auto it = adapters.find(k.first);
    return it != adapters.end() && it->second->version == k.second;
  });
}

KVSlot& EngineState::slot(int id) {
  auto it = slots.find(id);
  if (it != slots.end()) return *it->second;
  auto c = slot_caps.find(id);
  if (c == slot_caps.end()) FAIL("unknown KV slot " + std::to_string(id));
  auto s = std::make_unique<KVSlot>();
  model.slot_init(*s, c->second);
  KVSlot& ref = *s;
  slots[id] = std::move(s);
  slot_caps.erase(c);
  kv_allocated += slot_bytes(ref.cap);
  note_kv();
  return ref;
}

size_t EngineState::slot_bytes(int cap) const {
  const ModelConfig& c = model.cfg;
  return 2 * (size_t)c.layers * (size_t)cap * c.kv_heads * c.head_dim * sizeof(float);
}

int EngineState::create_slot(int cap) {
  CHECK(loaded, "model not loaded");
  const size_t need = slot_bytes(cap);
  if (kv_reserved + need > kv_budget)
    FAIL("KV cache budget exceeded: a sequence of " + std::to_string(cap) + " tokens needs " + std::to_string(need) +
         " bytes, " + std::to_string(kv_budget - std::min(kv_reserved, kv_budget)) + " of the budget's " +
         std::to_string(kv_budget) + " are free");
  kv_reserved += need;
  prefix_cache.set_limit(kv_budget - kv_reserved);
  const int id = next_slot++;
  slot_caps[id] = cap;
  note_kv();
  return id;
}

void EngineState::free_slot(int id) {
  auto it = slots.find(id);
  if (it != slots.end()) {
    const size_t b = slot_bytes(it->second->cap);
    kv_reserved -= b;
    kv_allocated -= b;
    slots.erase(it);
  }
  auto c = slot_caps.find(id);
  if (c != slot_caps.end()) {
    kv_reserved -= slot_bytes(c->second);
    slot_caps.erase(c);
  }
  prefix_cache.set_limit(kv_budget - kv_reserved);
  note_kv();
}

void EngineState::set_kv_budget(size_t bytes) {
  CHECK(kv_reserved <= bytes, "KV cache budget of " + std::to_string(bytes) + " bytes is below the " +
                                  std::to_string(kv_reserved) + " bytes live slots hold");
  kv_budget = bytes;
  prefix_cache.set_limit(kv_budget - kv_reserved);
  kv_stats.budget_bytes = bytes == SIZE_MAX ? 0 : bytes;
  note_kv();
}

void EngineState::note_kv() {
  const uint64_t now = kv_allocated + prefix_cache.bytes();
  kv_stats.reserved_bytes = kv_reserved;
  kv_stats.bytes = now;
  if (now > kv_stats.peak_bytes) kv_stats.peak_bytes = now;
  kv_stats.slots = slots.size();
  if (slots.size() > kv_stats.peak_slots) kv_stats.peak_slots = slots.size();
}

void EngineState::sample(const std::vector<int32_t>& ids, const BatchSampling& sp, std::vector<int32_t>& tok,
                         std::vector<float>& lp, std::vector<float>& slp, int& width, std::vector<int32_t>& top_ids,
                         std::vector<float>& top_lps) {
  const int B = (int)ids.size(), C = model.cfg.hidden, V = model.cfg.vocab;
  const std::vector<int32_t>& top_n = sp.top_logprobs;
  const TokenMasks& masks = sp.masks;
  CHECK((int)sp.temperature.size() == B && (int)sp.top_p.size() == B && (int)sp.top_k.size() == B && (int)top_n.size() == B,
        "sampling: temperature, topP, topK and topLogprobs need one entry per slot");
  width = 0;
  for (int i = 0; i < B; ++i) {
    CHECK(top_n[i] >= 0 && top_n[i] <= V, "topLogprobs must be in [0, vocab]");
    width = std::max(width, (int)top_n[i]);
  }
  CHECK(masks.idx.empty() || (int)masks.idx.size() == B, "maskIdx has one entry per slot");
  std::vector<const uint32_t*> allow(B);
  for (int i = 0; i < B; ++i) allow[i] = masks.row(i, V);
  std::vector<float> h((size_t)B * C);
  std::vector<KVSlot*> ss(B);
  for (int i = 0; i < B; ++i) {
    ss[i] = &slot(ids[i]);
    CHECK(ss[i]->has_h, "KV slot " + std::to_string(ids[i]) + " has no prefilled tokens to sample from");
    std::copy(ss[i]->last_h.begin(), ss[i]->last_h.end(), h.begin() + (size_t)i * C);
  }
  logits.resize((size_t)B * V);
  const Backend& be = *model.be;
  if (!be.memory) {
    be.logits_forward(logits.data(), h.data(), model.w.lm_head, B, C, V);
  } else {
    // The logits are computed where the weights are and come back in one copy: the sampler runs on the host.
    if (stage_logits.size < (size_t)B * V) stage_logits.allocate((size_t)B * V, be.memory);
    be.logits_forward(stage_logits.data, staged(be, stage_h, h.data(), h.size()), model.w.lm_head, B, C, V);
    be.download(logits.data(), stage_logits.data, sizeof(float) * B * V);
  }
  tok.assign(B, 0);
  lp.assign(B, 0.0f);
  slp.assign(B, 0.0f);
  top_ids.assign((size_t)B * width, -1);
  top_lps.assign((size_t)B * width, 0.0f);
  if ((int)sample_idx.size() < B) sample_idx.resize(B);
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < B; ++i) {
    SampleParams p{sp.temperature[i], sp.top_p[i], sp.top_k[i], top_n[i]};
    const size_t row = (size_t)i * width;
    tok[i] = sample_token(logits.data() + (size_t)i * V, V, p, allow[i], ss[i]->rng, &lp[i], &slp[i], top_ids.data() + row,
                          top_lps.data() + row, sample_idx[i]);
  }
}

}  // namespace mcprl
