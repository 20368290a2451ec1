// N-API boundary of the engine: the Engine class, setPortableGemm, info, cudaProbe; the trainer's bindings are in
// train/train_napi.cc. The ops alone, gradcheck and the benchmarks are in the test addon (testing/test_addon.cc). Every call either returns/throws synchronously (cheap bookkeeping) or returns a
// Promise whose work runs off the JS thread, on the process's compute thread (run_async). Every C++ exception
// is caught and becomes a rejected promise or a thrown JS Error: the Node process never aborts.
#include <napi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <mutex>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../backend/cuda_loader.h"
#include "../engine/engine_state.h"
#include "../kernels/gemm.h"
#include "../model/model.h"
#include "napi_util.h"
#include "../ops/lm_head.h"
#include "../engine/prefix_cache.h"
#include "../engine/sample.h"
#include "../train/train_napi.h"

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
