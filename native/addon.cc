// N-API boundary of the engine: the Engine class, gradcheck, gemm, info; the trainer's bindings are in
// train/train_napi.cc. Every call either returns/throws synchronously (cheap bookkeeping) or returns a
// Promise whose work runs off the JS thread, on the process's compute thread (run_async). Every C++ exception
// is caught and becomes a rejected promise or a thrown JS Error: the Node process never aborts.
#include <napi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>
#include <mutex>
#include <random>

#include "backend.h"
#include "common.h"
#include "cuda_loader.h"
#include "engine_state.h"
#include "gemm.h"
#include "gradcheck.h"
#include "model.h"
#include "napi_util.h"
#include "ops/lm_head.h"
#include "prefix_cache.h"
#include "sample.h"
#include "train/train_napi.h"

#ifdef _OPENMP
#include <omp.h>
#endif

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

namespace {

// The ModelSpec of src/hf/config.ts, every field required (native code has no defaults of its own).
ModelConfig model_config_from_js(const Napi::Object& o) {
  const std::string what = "spec";
  ModelConfig c{};
  c.model_type = str_field(o, what, "modelType");
  c.vocab = (int)int_field(o, what, "vocabSize", 1, kMaxInt);
  c.hidden = (int)int_field(o, what, "hiddenSize", 1, kMaxInt);
  c.inter = (int)int_field(o, what, "intermediateSize", 1, kMaxInt);
  c.layers = (int)int_field(o, what, "numLayers", 1, kMaxInt);
  c.heads = (int)int_field(o, what, "numHeads", 1, kMaxInt);
  c.kv_heads = (int)int_field(o, what, "numKvHeads", 1, kMaxInt);
  c.head_dim = (int)int_field(o, what, "headDim", 1, kMaxInt);
  c.max_pos = (int)int_field(o, what, "maxPositionEmbeddings", 1, kMaxInt);
  c.eps = (float)num_field(o, what, "rmsNormEps");
  c.rope_theta = (float)num_field(o, what, "ropeTheta");
  c.tie = bool_field(o, what, "tieWordEmbeddings");
  c.qkv_bias = bool_field(o, what, "qkvBias");
  c.o_bias = bool_field(o, what, "oBias");
  c.qk_norm = bool_field(o, what, "qkNorm");
  CHECK(!bool_field(o, what, "mlpBias"), "spec.mlpBias: bias on gate/up/down projections is not supported by the engine");
  Napi::Value rs = o.Get("ropeScaling");
  if (rs.IsNull()) {
    c.rope = RopeScaling{0, 0.0f, 0.0f, 0.0f, 0};
  } else {
    const std::string rw = what + ".ropeScaling";
    Napi::Object r = obj_arg(rs, rw);
    std::string type = str_field(r, rw, "type");
    c.rope.factor = (float)num_field(r, rw, "factor");
    if (type == "linear") {
      c.rope.type = 1;
    } else if (type == "llama3") {
      c.rope.type = 2;
      c.rope.low_freq_factor = (float)num_field(r, rw, "lowFreqFactor");
      c.rope.high_freq_factor = (float)num_field(r, rw, "highFreqFactor");
      c.rope.original_max_position = (int)int_field(r, rw, "originalMaxPositionEmbeddings", 1, kMaxInt);
    } else {
      FAIL(rw + ".type '" + type + "' is not supported (supported: linear, llama3)");
    }
  }
  return c;
}

// The BatchSampling of src/engine/native.ts, every field required.
BatchSampling sampling_from_js(const Napi::Value& v) {
  Napi::Object o = obj_arg(v, "sampling");
  BatchSampling s;
  s.temperature = to_f32(o.Get("temperature"), "sampling.temperature");
  s.top_p = to_f32(o.Get("topP"), "sampling.topP");
  s.top_k = to_i32(o.Get("topK"), "sampling.topK");
  s.top_logprobs = to_i32(o.Get("topLogprobs"), "sampling.topLogprobs");
  s.masks = to_masks(o.Get("maskIdx"), o.Get("masks"), "sampling");
  return s;
}

class Engine : public Napi::ObjectWrap<Engine> {
 public:
  static Napi::Function Init(Napi::Env env) {
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
  explicit Engine(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Engine>(info), st_(std::make_shared<EngineState>()) {}
  // Shared with the training bindings (train/train_napi.cc) so they use the same model, adapters and mutex.
  std::shared_ptr<EngineState> state() const { return st_; }

 private:
  std::shared_ptr<EngineState> st_;

  // load(dir: string, spec: ModelSpec (src/hf/config.ts), threads: number (0: all cores),
  //      weightDtype: 'auto' | 'f32' | 'bf16' (WeightMode, model.h; the default is src/engine/model.ts's),
  //      backend: 'cpu' | 'cpu-staged' | 'cuda' (backend.h; cuda after cudaProbe loaded the library)): Promise<void>
  Napi::Value Load(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::string dir = str_arg(info[0], "dir");
      ModelConfig cfg = model_config_from_js(obj_arg(info[1], "spec"));
      int threads = (int)int_arg(info[2], "threads", 0, kMaxThreads);
      const std::string wd = str_arg(info[3], "weightDtype");
      if (wd != "auto" && wd != "f32" && wd != "bf16")
        throw Napi::RangeError::New(info.Env(), "weightDtype must be 'auto', 'f32' or 'bf16', got '" + wd + "'");
      const WeightMode mode = wd == "f32" ? WeightMode::F32 : wd == "bf16" ? WeightMode::BF16 : WeightMode::Auto;
      const std::string bn = str_arg(info[4], "backend");
      const Backend* be = bn == "cpu" ? &cpu_backend() : bn == "cpu-staged" ? &cpu_staged_backend() : bn == "cuda" ? cuda_backend_table() : nullptr;
      if (bn != "cpu" && bn != "cpu-staged" && bn != "cuda")
        throw Napi::RangeError::New(info.Env(), "backend must be 'cpu', 'cpu-staged' or 'cuda', got '" + bn + "'");
      if (!be) throw Napi::Error::New(info.Env(), "backend cuda: the CUDA library is not loaded (cudaProbe first)");
      auto st = st_;
      return run_async(info.Env(), [st, dir, cfg, threads, mode, be] {
        std::lock_guard<std::mutex> g(st->mu);
        if (st->loaded) FAIL("engine already loaded");
        st->threads = threads;
        st->begin();
        st->model.load(dir, cfg, mode);
        // Loading and validation run on the host; the finished weights move in one copy per allocation.
        if (be->memory) st->model.to_backend(*be);
        st->loaded = true;
      });
    });
  }

  // loadAdapter(name, dir, config: {r, alpha, rslora, targets: string[]} from adapter_config.json, read in
  // TypeScript): Promise<{ r, alpha, scale, targets: string[] }>
  Napi::Value LoadAdapter(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::string name = str_arg(info[0], "adapter name"), dir = str_arg(info[1], "adapter dir");
      Napi::Object c = obj_arg(info[2], "adapter config");
      const int r = (int)int_field(c, "adapter config", "r", 1, kMaxRank);
      const float alpha = (float)num_field(c, "adapter config", "alpha");
      const bool rslora = bool_field(c, "adapter config", "rslora");
      std::array<bool, NUM_MODULES> targets{};
      for (auto& n : to_names(c.Get("targets"), "adapter config.targets")) {
        int m = module_index(n);
        CHECK(m >= 0, "unsupported LoRA target module '" + n + "'");
        targets[m] = true;
      }
      auto st = st_;
      auto a = std::make_shared<std::unique_ptr<LoraAdapter>>(std::make_unique<LoraAdapter>());
      return run_async(
          info.Env(),
          [st, name, dir, r, alpha, rslora, targets, a] {
            std::lock_guard<std::mutex> g(st->mu);
            st->begin();
            CHECK(st->loaded, "model not loaded");
            (*a)->name = name;
            lora_load(**a, st->model.cfg, dir, r, alpha, rslora, targets.data());
            if (st->model.be->memory) lora_to_backend(**a, *st->model.be);
          },
          [st, name, a](Napi::Env env) -> Napi::Value {
            LoraAdapter& ad = **a;
            auto o = Napi::Object::New(env);
            o.Set("r", ad.r);
            o.Set("alpha", ad.alpha);
            o.Set("scale", ad.scale);
            auto t = Napi::Array::New(env);
            for (int m = 0, k = 0; m < NUM_MODULES; ++m)
              if (ad.targets[m]) t.Set(k++, module_name(m));
            o.Set("targets", t);
            std::lock_guard<std::mutex> g(st->mu);
            st->adapters[name] = std::move(*a);
            return o;
          });
    });
  }

  // weightBytes(): { f32, bf16, f16 } bytes of base weights held in each dtype (after load).
  Napi::Value WeightBytes(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::lock_guard<std::mutex> g(st_->mu);
      CHECK(st_->loaded, "model not loaded");
      const ModelWeights& w = st_->model.w;
      Napi::Object o = Napi::Object::New(info.Env());
      o.Set("f32", (double)w.memory.size * 4);
      o.Set("bf16", (double)w.elems_bf16 * 2);
      o.Set("f16", (double)w.elems_f16 * 2);
      return o;
    });
  }

  Napi::Value UnloadAdapter(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::lock_guard<std::mutex> g(st_->mu);
      st_->adapters.erase(str_arg(info[0], "adapter name"));
      st_->purge_stale_prefixes();
      return info.Env().Undefined();
    });
  }

  // score(tokens: Int32Array, lens: Int32Array, adapter: string|null,
  //       invTemp?: Float32Array|null, maskIdx?: Int32Array|null, masks?: Uint32Array|null): Promise<Float32Array>
  // Output aligned with tokens: out[start] = 0, out[start + t] = log p(tok[t] | tok[<t]). invTemp and maskIdx,
  // when given, are aligned with tokens too: token t's log p is of softmax(logits × invTemp[t]) renormalised over
  // the allowed set masks[maskIdx[t]] (ceil(V / 32) words each; −1: the whole vocabulary), as the trainer's loss
  // computes it, so that a sampler's tempered, constrained logprobs can be compared with the trainer's own.
  Napi::Value Score(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      auto tokens = std::make_shared<std::vector<int32_t>>(to_i32(info[0], "tokens"));
      auto lens = to_i32(info[1], "lens");
      std::string adapter = info[2].IsNull() ? "" : str_arg(info[2], "adapter");
      const bool has_temp = info.Length() > 3 && !info[3].IsNull() && !info[3].IsUndefined();
      auto inv_temp = std::make_shared<std::vector<float>>(has_temp ? to_f32(info[3], "invTemp") : std::vector<float>());
      auto tm = std::make_shared<TokenMasks>(info.Length() > 4 ? to_masks(info[4], info[5], "score") : TokenMasks());
      auto out = std::make_shared<std::vector<float>>(tokens->size(), 0.0f);
      auto st = st_;
      return run_async(
          info.Env(),
          [st, tokens, lens, adapter, out, inv_temp, tm] {
            std::lock_guard<std::mutex> g(st->mu);
            st->begin();
            CHECK(st->loaded, "model not loaded");
            const LoraAdapter* ad = st->adapter(adapter);
            size_t total = 0;
            for (int n : lens) { CHECK(n >= 0, "negative sequence length"); total += n; }
            CHECK(total == tokens->size(), "sequence lengths do not add up to the token count");
            Model& m = st->model;
            const int C = m.cfg.hidden, V = m.cfg.vocab;
            const size_t words = ((size_t)V + 31) / 32;
            CHECK(inv_temp->empty() || inv_temp->size() == tokens->size(), "invTemp must have one entry per token");
            const std::vector<int32_t>* mask_idx = &tm->idx;
            CHECK(mask_idx->empty() || mask_idx->size() == tokens->size(), "maskIdx must have one entry per token");
            for (float it : *inv_temp) CHECK(it > 0.0f && std::isfinite(it), "temperatures must be positive");
            for (int32_t k : *mask_idx) CHECK(k < 0 || ((size_t)k + 1) * words <= tm->bits.size(), "token mask index out of range");
            const int budget = 4096;  // tokens per forward: bounds activation memory
            std::vector<float> scratch;  // the LM head's logits, lm_head_chunk_rows of them at a time
            size_t i = 0, off = 0;
            while (i < lens.size()) {
              std::vector<Segment> segs;
              size_t start = off;
              int T = 0;
              while (i < lens.size() && (T == 0 || T + lens[i] <= budget)) {
                if (lens[i] > 0) {
                  Segment s;
                  s.n = lens[i];
                  s.adapter = ad;
                  segs.push_back(s);
                }
                T += lens[i];
                off += lens[i];
                ++i;
              }
              if (T == 0) continue;
              const int chunk = lm_head_chunk_rows(V, T);
              m.forward(tokens->data() + start, T, segs, st->rs, false, nullptr);
              std::vector<int32_t> tg(T, 0);
              for (int t = 0; t + 1 < T; ++t) tg[t] = (*tokens)[start + t + 1];
              // Row t predicts token start + t + 1: it takes that token's temperature and allowed set. The last row
              // of a segment predicts nothing kept (its target is 0 or the next segment's first token).
              std::vector<float> it_rows(inv_temp->empty() ? 0 : T, 1.0f);
              std::vector<int32_t> mi_rows(mask_idx->empty() ? 0 : T, -1);
              for (int t = 0; t + 1 < T; ++t) {
                if (!it_rows.empty()) it_rows[t] = (*inv_temp)[start + t + 1];
                if (!mi_rows.empty()) mi_rows[t] = (*mask_idx)[start + t + 1];
              }
              // The two-pass head's logits (up to 64 MiB, zeroed by the resize): not when the fused path takes the call.
              const bool two_pass = !lm_head_fused_applies(T, C, V, mi_rows.empty() ? nullptr : mi_rows.data());
              if (two_pass && scratch.size() < lm_head_scratch_floats(V, T)) scratch.resize(lm_head_scratch_floats(V, T));
              std::vector<float> lp(T), lse(T);
              const Backend& be = *m.be;
              if (!be.memory) {
                be.lm_head_forward(lp.data(), lse.data(), nullptr, nullptr, st->rs.hf, m.w.lm_head, tg.data(), T, C, V, scratch.data(), chunk,
                                   it_rows.empty() ? nullptr : it_rows.data(), mi_rows.empty() ? nullptr : mi_rows.data(),
                                   mi_rows.empty() ? nullptr : tm->bits.data());
              } else {
                // Elsewhere: the targets, temperatures and masks go there, the log-probabilities come back.
                ScoreStage& sg = st->score_stage;
                if (sg.lp.size < (size_t)T) sg.lp.allocate(T, be.memory), sg.lse.allocate(T, be.memory);
                if (two_pass && sg.scratch.size < scratch.size()) sg.scratch.allocate(scratch.size(), be.memory);
                be.lm_head_forward(sg.lp.data, sg.lse.data, nullptr, nullptr, st->rs.hf, m.w.lm_head, staged(be, sg.targets, tg.data(), T), T, C,
                                   V, two_pass ? sg.scratch.data : nullptr, chunk,
                                   it_rows.empty() ? nullptr : staged(be, sg.inv_temp, it_rows.data(), T),
                                   mi_rows.empty() ? nullptr : staged(be, sg.mask_idx, mi_rows.data(), T),
                                   mi_rows.empty() ? nullptr : staged(be, sg.masks, tm->bits.data(), tm->bits.size()));
                be.download(lp.data(), sg.lp.data, sizeof(float) * T);
              }
              size_t row = 0;
              for (auto& s : segs) {
                for (int t = 1; t < s.n; ++t) (*out)[start + row + t] = lp[row + t - 1];
                row += s.n;
              }
            }
          },
          [out](Napi::Env env) -> Napi::Value { return f32_array(env, *out); });
    });
  }

  // slotCreate(capacity): number — reserves the slot's bytes under the KV budget (an error naming them when they do
  // not fit); the cache is allocated lazily by the first task that uses it.
  Napi::Value SlotCreate(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::lock_guard<std::mutex> g(st_->mu);
      int cap = (int)int_arg(info[0], "KV slot capacity", 1, kMaxInt);
      return Napi::Number::New(info.Env(), st_->create_slot(cap));
    });
  }

  Napi::Value SlotFree(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::lock_guard<std::mutex> g(st_->mu);
      int id = (int)int_arg(info[0], "KV slot", 0, kMaxInt);
      st_->free_slot(id);
      return info.Env().Undefined();
    });
  }

  // slotSeed(id, seed, stream): the slot's sampling RNG state = f(seed, stream).
  Napi::Value SlotSeed(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::lock_guard<std::mutex> g(st_->mu);
      int id = (int)int_arg(info[0], "KV slot", 0, kMaxInt);
      uint64_t seed = (uint64_t)int_arg(info[1], "seed", -kMaxSafeInt, kMaxSafeInt);
      uint64_t stream = (uint64_t)int_arg(info[2], "stream", 0, kMaxSafeInt);
      st_->slot(id).rng = rng_seed(seed, stream);
      return info.Env().Undefined();
    });
  }

  // fork(src, dsts: Int32Array): Promise<void> — copy src's cache into each dst (n samples share a prefill).
  Napi::Value Fork(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      int src = (int)int_arg(info[0], "KV slot", 0, kMaxInt);
      auto dsts = to_i32(info[1], "dsts");
      auto st = st_;
      return run_async(info.Env(), [st, src, dsts] {
        std::lock_guard<std::mutex> g(st->mu);
        st->begin();
        KVSlot& s = st->slot(src);
        for (int d : dsts) {
          uint64_t rng = st->slot(d).rng;
          st->model.slot_copy(st->slot(d), s);
          st->slot(d).rng = rng;
        }
      });
    });
  }

  // prefill(slots: Int32Array, tokens: Int32Array, lens: Int32Array, adapters: (string|null)[]): Promise<void>
  Napi::Value Prefill(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      auto ids = to_i32(info[0], "slots");
      auto tokens = to_i32(info[1], "tokens");
      auto lens = to_i32(info[2], "lens");
      auto names = to_names(info[3], "adapters");
      auto st = st_;
      return run_async(info.Env(), [st, ids, tokens, lens, names] {
        std::lock_guard<std::mutex> g(st->mu);
        st->begin();
        CHECK(st->loaded, "model not loaded");
        CHECK(ids.size() == lens.size() && ids.size() == names.size(), "prefill arrays differ in length");
        std::vector<Segment> segs(ids.size());
        size_t total = 0;
        for (size_t i = 0; i < ids.size(); ++i) {
          segs[i].n = lens[i];
          segs[i].slot = &st->slot(ids[i]);
          segs[i].adapter = st->adapter(names[i]);
          total += lens[i];
        }
        CHECK(total == tokens.size(), "prefill lengths do not add up to the token count");
        st->purge_stale_prefixes();
        // One prompt at a time, in the GEMM's blocked mode (prefix_cache.h): a prompt's activations then depend on
        // that prompt alone — not on which other prompts arrived at the same time, nor on whether its start came
        // from the prefix cache. Each prompt's blocks are in the cache before the next prompt looks, so a group's
        // identical prompts in one call are computed once.
        size_t off = 0;
        for (size_t i = 0; i < segs.size(); ++i) {
          CHECK(lens[i] > 0, "empty prompt");
          prefill_chunked(st->model, st->rs, st->prefix_cache, *segs[i].slot, tokens.data() + off, lens[i], segs[i].adapter);
          st->note_kv();
          off += lens[i];
        }
      });
    });
  }

  // prefixCache(capacityBytes: number): void — the prefix cache's byte budget (0: off; smaller: evicts now).
  Napi::Value PrefixCacheCapacity(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      const double bytes = int_arg(info[0], "prefix cache bytes", 0, kMaxSafeInt);
      std::lock_guard<std::mutex> g(st_->mu);
      st_->prefix_cache.set_capacity((size_t)bytes);
      st_->note_kv();
      return info.Env().Undefined();
    });
  }

  // kvCache(budgetBytes: number): void — the KV cache's byte budget, slots and prefix cache together (EngineState);
  // fails when the slots live now reserve more than it.
  Napi::Value KvCacheBudget(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      const double bytes = int_arg(info[0], "KV cache bytes", 0, kMaxSafeInt);
      std::lock_guard<std::mutex> g(st_->mu);
      CHECK(st_->loaded, "model not loaded");
      st_->set_kv_budget((size_t)bytes);
      return info.Env().Undefined();
    });
  }

  // kvSlotBytes(capacity: number): number — the bytes a slot of that many tokens reserves (its keys and values).
  Napi::Value KvSlotBytes(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      const int cap = (int)int_arg(info[0], "KV slot capacity", 1, kMaxInt);
      std::lock_guard<std::mutex> g(st_->mu);
      CHECK(st_->loaded, "model not loaded");
      return Napi::Number::New(info.Env(), (double)st_->slot_bytes(cap));
    });
  }

  // backend(): the name of the Backend table the model runs on ('cpu', 'cpu-staged', 'cuda'; backend.h).
  Napi::Value BackendName(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::lock_guard<std::mutex> g(st_->mu);
      return Napi::String::New(info.Env(), st_->model.be->name);
    });
  }

  // kvCacheStats(): { budgetBytes, reservedBytes, bytes, peakBytes, slots, peakSlots } (KvCacheStats in
  // engine_state.h), read without the engine lock.
  Napi::Value KvCacheStatsJs(const Napi::CallbackInfo& info) {
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

  // prefixCacheStats(): counters since load (prompts, promptTokens, hitTokens, hitBlocks, prefilledTokens,
  // insertedBlocks, evictedBlocks), the cache now (blocks, bytes, capacityBytes) and blockTokens; read without
  // the engine lock.
  Napi::Value PrefixCacheStatsJs(const Napi::CallbackInfo& info) {
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

  struct Sampled {
    std::vector<int32_t> tok, top_ids;
    std::vector<float> lp, slp, top_lps;
    int width = 0;
  };
  static Napi::Value sampled(Napi::Env env, const Sampled& s) {
    auto o = Napi::Object::New(env);
    o.Set("tokens", i32_array(env, s.tok));
    o.Set("logprobs", f32_array(env, s.lp));
    o.Set("samplerLogprobs", f32_array(env, s.slp));
    o.Set("topWidth", Napi::Number::New(env, s.width));
    o.Set("topIds", i32_array(env, s.top_ids));
    o.Set("topLogprobs", f32_array(env, s.top_lps));
    return o;
  }

  // sample(slots: Int32Array, sampling: BatchSampling (src/engine/native.ts: one entry per slot))
  //   : Promise<{tokens, logprobs, samplerLogprobs, topWidth, topIds, topLogprobs}> (see sample.h)
  Napi::Value Sample(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      auto ids = to_i32(info[0], "slots");
      auto sp = std::make_shared<BatchSampling>(sampling_from_js(info[1]));
      auto out = std::make_shared<Sampled>();
      auto st = st_;
      return run_async(
          info.Env(),
          [st, ids, sp, out] {
            std::lock_guard<std::mutex> g(st->mu);
            st->begin();
            RowwiseGemm rowwise;  // batch-invariant: see gemm.h
            st->sample(ids, *sp, out->tok, out->lp, out->slp, out->width, out->top_ids, out->top_lps);
          },
          [out](Napi::Env env) { return sampled(env, *out); });
    });
  }

  // step(slots, tokens, adapters, sampling: BatchSampling): the same result as sample() — append one token to each
  // slot (one shared decode forward), then sample each slot's next token.
  Napi::Value Step(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      auto ids = to_i32(info[0], "slots");
      auto tokens = to_i32(info[1], "tokens");
      auto names = to_names(info[2], "adapters");
      auto sp = std::make_shared<BatchSampling>(sampling_from_js(info[3]));
      auto out = std::make_shared<Sampled>();
      auto st = st_;
      return run_async(
          info.Env(),
          [st, ids, tokens, names, sp, out] {
            std::lock_guard<std::mutex> g(st->mu);
            st->begin();
            CHECK(ids.size() == tokens.size() && ids.size() == names.size(), "step arrays differ in length");
            RowwiseGemm rowwise;  // batch-invariant: see gemm.h
            std::vector<Segment> segs(ids.size());
            for (size_t i = 0; i < ids.size(); ++i) {
              segs[i].n = 1;
              segs[i].slot = &st->slot(ids[i]);
              segs[i].adapter = st->adapter(names[i]);
            }
            st->model.forward(tokens.data(), (int)tokens.size(), segs, st->rs, false, nullptr);
            st->sample(ids, *sp, out->tok, out->lp, out->slp, out->width, out->top_ids, out->top_lps);
          },
          [out](Napi::Env env) { return sampled(env, *out); });
    });
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      // A running task holds the mutex and a reference to the state; it finishes first, then memory goes.
      std::lock_guard<std::mutex> g(st_->mu);
      st_->closed = true;
      st_->adapters.clear();
      st_->slots.clear();
      st_->slot_caps.clear();
      st_->kv_reserved = st_->kv_allocated = 0;
      st_->prefix_cache.clear();
      st_->rs = RunState();
      st_->model = Model();
      st_->logits = std::vector<float>();
      st_->stage_h = FloatBuffer();
      st_->stage_logits = FloatBuffer();
      st_->score_stage = ScoreStage();
      return info.Env().Undefined();
    });
  }
};

// gradcheck(op, seed, eps, samples): [{ input, maxAbsErr, maxAbsGrad, checked }]
Napi::Value Gradcheck(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    set_threads(1);
    auto res = gradcheck_op(str_arg(info[0], "op"), (unsigned)int_arg(info[1], "seed", 0, 4294967295LL),
                            num_arg(info[2], "eps"), (int)int_arg(info[3], "samples", 1, kMaxInt));
    auto arr = Napi::Array::New(info.Env(), res.size());
    for (size_t i = 0; i < res.size(); ++i) {
      auto o = Napi::Object::New(info.Env());
      o.Set("input", res[i].input);
      o.Set("maxAbsErr", res[i].max_abs_err);
      o.Set("maxAbsGrad", res[i].max_abs_grad);
      o.Set("checked", res[i].checked);
      arr.Set((uint32_t)i, o);
    }
    return arr;
  });
}

// gemm(transA, transB, M, N, K, A, B, kernel: 'portable'|'portable-avx2'|'blas'|'auto', threads): Float32Array
// C = op(A) op(B). 'portable-avx2' is the portable kernel with its AVX2 tiles even where the CPU has AVX-512.
Napi::Value Gemm(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    bool ta = bool_arg(info[0], "transA"), tb = bool_arg(info[1], "transB");
    int M = (int)int_arg(info[2], "M", 1, kMaxInt), N = (int)int_arg(info[3], "N", 1, kMaxInt),
        K = (int)int_arg(info[4], "K", 1, kMaxInt);
    auto A = to_f32(info[5], "A");
    auto B = to_f32(info[6], "B");
    std::string kernel = str_arg(info[7], "kernel");
    set_threads(info[8].IsUndefined() ? 0 : (int)int_arg(info[8], "threads", 0, kMaxThreads));  // test helper: all cores when left out
    CHECK(M > 0 && N > 0 && K > 0 && A.size() == (size_t)M * K && B.size() == (size_t)K * N, "gemm: bad sizes");
    std::vector<float> C((size_t)M * N, 0.0f);
    int lda = ta ? M : K, ldb = tb ? K : N;
    if (kernel == "portable-avx2") {
      const bool prev = gemm_avx512();
      gemm_set_avx512(false);
      gemm_portable(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
      gemm_set_avx512(prev);
    } else if (kernel == "portable") gemm_portable(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
    else if (kernel == "blas") gemm_blas(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
    else gemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
    return f32_array(info.Env(), C);
  });
}

// gemmBench(n, kernel, reps, threads): Promise<number> GFLOP/s of an n x n x n sgemm (best of reps).
Napi::Value GemmBench(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    int n = (int)int_arg(info[0], "n", 1, 1 << 16);
    std::string kernel = str_arg(info[1], "kernel");
    int reps = (int)int_arg(info[2], "reps", 1, kMaxInt);
    int threads = info[3].IsUndefined() ? 0 : (int)int_arg(info[3], "threads", 0, kMaxThreads);  // bench helper: all cores when left out
    if (kernel == "blas" && !gemm_have_blas()) throw Napi::Error::New(info.Env(), "this build has no OpenBLAS");
    auto result = std::make_shared<double>(0.0);
    return run_async(
        info.Env(),
        [n, kernel, reps, threads, result] {
          set_threads(threads);
          std::vector<float> A((size_t)n * n), B((size_t)n * n), C((size_t)n * n);
          std::mt19937 rng(1);
          std::uniform_real_distribution<float> d(-1, 1);
          for (auto& x : A) x = d(rng);
          for (auto& x : B) x = d(rng);
          double best = 1e30;
          for (int r = 0; r < reps; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            if (kernel == "portable") gemm_portable(false, true, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
            else gemm_blas(false, true, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            best = std::min(best, s);
          }
          *result = 2.0 * n * (double)n * n / best / 1e9;
        },
        [result](Napi::Env env) -> Napi::Value { return Napi::Number::New(env, *result); });
  });
}

// Seconds of CPU time of the calling thread: the single-threaded op benchmarks below measure this, not wall time,
// so a busy machine (other processes taking turns on the cores) changes the figures less.
static double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The attention op alone (tests and bench). Shapes as native/ops/attention.h; `kernel` 'tiles' (the engine's)
// or 'reference' (the double-precision oracle).
struct AttnShape {
  int H, Hkv, D;
};
static AttnShape attn_shape(const Napi::CallbackInfo& info, int at) {
  AttnShape s{(int)int_arg(info[at], "H", 1, 4096), (int)int_arg(info[at + 1], "Hkv", 1, 4096),
              (int)int_arg(info[at + 2], "D", 1, 4096)};
  CHECK(s.H % s.Hkv == 0, "attention: H must be a multiple of Hkv");
  return s;
}
static bool attn_reference(const Napi::Value& v) {
  std::string kernel = str_arg(v, "kernel");
  CHECK(kernel == "tiles" || kernel == "reference", "attention: kernel must be 'tiles' or 'reference', got '" + kernel + "'");
  return kernel == "reference";
}

// attention(q, k, v, H, Hkv, D, segments: Int32Array of (q0, nq, npast, kRow0) per segment, kernel, threads?):
// { out, lse }. Segment s reads key/value rows kRow0 .. kRow0 + npast + nq of k/v.
Napi::Value Attention(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    auto q = to_f32(info[0], "q"), k = to_f32(info[1], "k"), v = to_f32(info[2], "v");
    AttnShape sh = attn_shape(info, 3);
    auto sg = to_i32(info[6], "segments");
    bool ref = attn_reference(info[7]);
    set_threads(info[8].IsUndefined() ? 0 : (int)int_arg(info[8], "threads", 0, kMaxThreads));
    const size_t qrow = (size_t)sh.H * sh.D, krow = (size_t)sh.Hkv * sh.D;
    CHECK(q.size() % qrow == 0 && k.size() % krow == 0 && v.size() == k.size() && sg.size() % 4 == 0,
          "attention: q, k, v or segments have the wrong length");
    const int64_t T = (int64_t)(q.size() / qrow), keys = (int64_t)(k.size() / krow);
    std::vector<AttnSegment> segs(sg.size() / 4);
    for (size_t s = 0; s < segs.size(); ++s) {
      const int64_t q0 = sg[4 * s], nq = sg[4 * s + 1], npast = sg[4 * s + 2], k0 = sg[4 * s + 3];
      CHECK(q0 >= 0 && nq >= 1 && q0 + nq <= T && npast >= 0 && k0 >= 0 && k0 + npast + nq <= keys,
            "attention: segment " + std::to_string(s) + " is out of range of q or k");
      segs[s] = AttnSegment{(int)q0, (int)nq, (int)npast, k.data() + k0 * krow, v.data() + k0 * krow};
    }
    std::vector<float> out(q.size(), 0.0f), lse((size_t)T * sh.H, 0.0f);
    if (ref) attention_forward_reference(out.data(), lse.data(), q.data(), segs.data(), (int)segs.size(), sh.H, sh.Hkv, sh.D);
    else cpu_backend().attention_forward(out.data(), lse.data(), q.data(), segs.data(), (int)segs.size(), sh.H, sh.Hkv, sh.D);
    auto o = Napi::Object::New(info.Env());
    o.Set("out", f32_array(info.Env(), out));
    o.Set("lse", f32_array(info.Env(), lse));
    return o;
  });
}

// attentionBackward(dout, q, k, v, out, lse, cuSeqlens, H, Hkv, D, kernel, threads?): { dq, dk, dv } of packed
// sequences (npast = 0; k/v rows packed like q's).
Napi::Value AttentionBackward(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    auto dout = to_f32(info[0], "dout"), q = to_f32(info[1], "q"), k = to_f32(info[2], "k"), v = to_f32(info[3], "v");
    auto out = to_f32(info[4], "out"), lse = to_f32(info[5], "lse");
    auto cu = to_i32(info[6], "cuSeqlens");
    AttnShape sh = attn_shape(info, 7);
    bool ref = attn_reference(info[10]);
    set_threads(info[11].IsUndefined() ? 0 : (int)int_arg(info[11], "threads", 0, kMaxThreads));
    const size_t qrow = (size_t)sh.H * sh.D, krow = (size_t)sh.Hkv * sh.D;
    CHECK(q.size() % qrow == 0 && cu.size() >= 2 && cu.front() == 0, "attention: bad q or cuSeqlens");
    const size_t T = q.size() / qrow;
    for (size_t s = 1; s < cu.size(); ++s) CHECK(cu[s] > cu[s - 1], "attention: cuSeqlens must increase");
    CHECK((size_t)cu.back() == T && dout.size() == q.size() && out.size() == q.size() && k.size() == T * krow &&
              v.size() == k.size() && lse.size() == T * sh.H,
          "attention: dout, k, v, out, lse or cuSeqlens disagree with q's T");
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    const int nseq = (int)cu.size() - 1;
    if (ref)
      attention_backward_reference(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                                   lse.data(), cu.data(), nseq, sh.H, sh.Hkv, sh.D);
    else
      cpu_backend().attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                       out.data(), lse.data(), cu.data(), nseq, sh.H, sh.Hkv, sh.D);
    auto o = Napi::Object::New(info.Env());
    o.Set("dq", f32_array(info.Env(), dq));
    o.Set("dk", f32_array(info.Env(), dk));
    o.Set("dv", f32_array(info.Env(), dv));
    return o;
  });
}

// swiglu(gate, up, dout, threads?): { out, dgate, dup }, the engine's SwiGLU forward and backward on N elements (tests).
Napi::Value Swiglu(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    auto gate = to_f32(info[0], "gate"), up = to_f32(info[1], "up"), dout = to_f32(info[2], "dout");
    set_threads(info[3].IsUndefined() ? 0 : (int)int_arg(info[3], "threads", 0, kMaxThreads));
    CHECK(up.size() == gate.size() && dout.size() == gate.size(), "swiglu: gate, up and dout differ in length");
    const long N = (long)gate.size();
    std::vector<float> out(N), dgate(N), dup(N);
    const Backend& be = cpu_backend();
    be.swiglu_forward(out.data(), gate.data(), up.data(), N);
    be.swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), N);
    auto o = Napi::Object::New(info.Env());
    o.Set("out", f32_array(info.Env(), out));
    o.Set("dgate", f32_array(info.Env(), dgate));
    o.Set("dup", f32_array(info.Env(), dup));
    return o;
  });
}

// rmsnorm(x, w, dout, C, eps, threads?): { out, rstd, dx, dw }, the engine's RMSNorm forward and backward on the
// N = x.length / C rows of x (tests; dw starts at 0).
Napi::Value Rmsnorm(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    auto x = to_f32(info[0], "x"), w = to_f32(info[1], "w"), dout = to_f32(info[2], "dout");
    const int C = (int)int_arg(info[3], "C", 1, kMaxInt);
    const float eps = (float)num_arg(info[4], "eps");
    set_threads(info[5].IsUndefined() ? 0 : (int)int_arg(info[5], "threads", 0, kMaxThreads));
    CHECK(w.size() == (size_t)C && x.size() % C == 0 && dout.size() == x.size(),
          "rmsnorm: w must hold C entries, x and dout whole rows of C");
    const int N = (int)(x.size() / C);
    std::vector<float> out(x.size()), rstd(N), dx(x.size()), dw(C, 0.0f);
    const Backend& be = cpu_backend();
    be.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    be.rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    auto o = Napi::Object::New(info.Env());
    o.Set("out", f32_array(info.Env(), out));
    o.Set("rstd", f32_array(info.Env(), rstd));
    o.Set("dx", f32_array(info.Env(), dx));
    o.Set("dw", f32_array(info.Env(), dw));
    return o;
  });
}

// attentionBench(T, H, Hkv, D, reps): Promise<{ forward, backward }>, CPU seconds (best of reps) of the op on one
// causal sequence of T random rows, single-threaded.
Napi::Value AttentionBench(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    int T = (int)int_arg(info[0], "T", 1, 1 << 20);
    AttnShape sh = attn_shape(info, 1);
    int reps = (int)int_arg(info[4], "reps", 1, kMaxInt);
    auto result = std::make_shared<std::array<double, 2>>();
    return run_async(
        info.Env(),
        [T, sh, reps, result] {
          set_threads(1);
          const size_t nq = (size_t)T * sh.H * sh.D, nk = (size_t)T * sh.Hkv * sh.D;
          std::vector<float> q(nq), k(nk), v(nk), g(nq), out(nq), lse((size_t)T * sh.H), dq(nq), dk(nk), dv(nk);
          std::mt19937 rng(1);
          std::normal_distribution<float> d;
          for (auto* x : {&q, &k, &v, &g})
            for (auto& e : *x) e = d(rng);
          AttnSegment seg{0, T, 0, k.data(), v.data()};
          int cu[2] = {0, T};
          const Backend& be = cpu_backend();
          (*result)[0] = (*result)[1] = 1e30;
          for (int r = 0; r < reps; ++r) {
            const double t0 = thread_cpu_seconds();
            be.attention_forward(out.data(), lse.data(), q.data(), &seg, 1, sh.H, sh.Hkv, sh.D);
            const double t1 = thread_cpu_seconds();
            be.attention_backward(dq.data(), dk.data(), dv.data(), g.data(), q.data(), k.data(), v.data(), out.data(),
                                  lse.data(), cu, 1, sh.H, sh.Hkv, sh.D);
            const double t2 = thread_cpu_seconds();
            (*result)[0] = std::min((*result)[0], t1 - t0);
            (*result)[1] = std::min((*result)[1], t2 - t1);
          }
        },
        [result](Napi::Env env) -> Napi::Value {
          auto o = Napi::Object::New(env);
          o.Set("forward", (*result)[0]);
          o.Set("backward", (*result)[1]);
          return o;
        });
  });
}

// lmHeadBench(N, C, V, reps): Promise<{ forward, backward, gemm }>, CPU seconds (best of reps, single-threaded): the LM head's
// forward (log-probabilities and the saved g, chunks and tiles of the training's size) and backward on N random rows
// against a random f32 (V, C) head, and the plain GEMMs of the same shapes (per chunk and vocabulary tile z = h Wᵀ,
// then g += P W),
// the rate the op is measured against.
Napi::Value LmHeadBench(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    int N = (int)int_arg(info[0], "N", 1, 1 << 20), C = (int)int_arg(info[1], "C", 1, 1 << 16),
        V = (int)int_arg(info[2], "V", 1, 1 << 24);
    int reps = (int)int_arg(info[3], "reps", 1, kMaxInt);
    auto result = std::make_shared<std::array<double, 3>>();
    return run_async(
        info.Env(),
        [N, C, V, reps, result] {
          set_threads(1);
          const int chunk = lm_head_chunk_rows(V, N), cols = lm_head_tile_cols(V);  // as the trainer's and scoring's
          std::vector<float> h((size_t)N * C), W((size_t)V * C), g((size_t)N * C), dh((size_t)N * C);
          std::vector<float> logp(N), lse(N), dlogp(N, 1.0f), scratch(lm_head_scratch_floats(V, N));
          std::vector<int32_t> tg(N);
          std::mt19937 rng(1);
          std::normal_distribution<float> d;
          for (auto& x : h) x = d(rng);
          for (auto& x : W) x = 0.05f * d(rng);
          for (auto& t : tg) t = (int32_t)(rng() % (unsigned)V);
          const Backend& be = cpu_backend();
          auto secs = [](double t0) { return thread_cpu_seconds() - t0; };
          (*result)[0] = (*result)[1] = (*result)[2] = 1e30;
          for (int r = 0; r < reps; ++r) {
            double t0 = thread_cpu_seconds();
            be.lm_head_forward(logp.data(), lse.data(), nullptr, g.data(), h.data(), W.data(), tg.data(), N, C, V,
                               scratch.data(), chunk, nullptr, nullptr, nullptr);
            (*result)[0] = std::min((*result)[0], secs(t0));
            t0 = thread_cpu_seconds();
            be.lm_head_backward(dh.data(), dlogp.data(), g.data(), W.data(), tg.data(), N, C, nullptr);
            (*result)[1] = std::min((*result)[1], secs(t0));
            t0 = thread_cpu_seconds();
            for (int n0 = 0; n0 < N; n0 += chunk) {
              const int m = std::min(chunk, N - n0);
              for (int v0 = 0; v0 < V; v0 += cols) {
                const int vc = std::min(cols, V - v0);
                const float* Wt = W.data() + (size_t)v0 * C;
                gemm(false, true, m, vc, C, 1.0f, h.data() + (size_t)n0 * C, C, Wt, C, 0.0f, scratch.data(), vc);
                gemm(false, false, m, C, vc, 1.0f, scratch.data(), vc, Wt, C, v0 > 0 ? 1.0f : 0.0f,
                     g.data() + (size_t)n0 * C, C);
              }
            }
            (*result)[2] = std::min((*result)[2], secs(t0));
          }
        },
        [result](Napi::Env env) -> Napi::Value {
          auto o = Napi::Object::New(env);
          o.Set("forward", (*result)[0]);
          o.Set("backward", (*result)[1]);
          o.Set("gemm", (*result)[2]);
          return o;
        });
  });
}

Napi::Value SetPortableGemm(const Napi::CallbackInfo& info) {
  gemm_set_portable(bool_arg(info[0], "portable"));
  return info.Env().Undefined();
}

Napi::Value Info(const Napi::CallbackInfo& info) {
  auto o = Napi::Object::New(info.Env());
  o.Set("openblas", gemm_have_blas());
  o.Set("portableGemm", !gemm_have_blas() || gemm_portable_forced());
  o.Set("gemmAvx512", gemm_avx512());
  o.Set("backend", cpu_backend().name);
  const BlasForkStats bf = blas_fork_stats();
  o.Set("blasCalls", (double)bf.blas_calls);
  o.Set("forks", (double)bf.forks);
  o.Set("taskThreads", task_threads());
  const auto& types = supported_model_types();
  auto model_types = Napi::Array::New(info.Env(), types.size());
  for (uint32_t i = 0; i < types.size(); ++i) model_types.Set(i, types[i]);
  o.Set("modelTypes", model_types);
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
  exports.Set("gradcheck", Napi::Function::New(env, Gradcheck));
  exports.Set("gemm", Napi::Function::New(env, Gemm));
  exports.Set("gemmBench", Napi::Function::New(env, GemmBench));
  exports.Set("attention", Napi::Function::New(env, Attention));
  exports.Set("attentionBackward", Napi::Function::New(env, AttentionBackward));
  exports.Set("attentionBench", Napi::Function::New(env, AttentionBench));
  exports.Set("swiglu", Napi::Function::New(env, Swiglu));
  exports.Set("rmsnorm", Napi::Function::New(env, Rmsnorm));
  exports.Set("lmHeadBench", Napi::Function::New(env, LmHeadBench));
  exports.Set("setPortableGemm", Napi::Function::New(env, SetPortableGemm));
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
