// Engine's generation bindings (engine.h): KV slots (create, free, seed, fork), prefill through the prefix cache,
// and sample / step, one token per slot.
#include <mutex>

#include "../core/common.h"
#include "../engine/prefix_cache.h"
#include "../engine/sample.h"
#include "../kernels/gemm.h"
#include "../model/model.h"
#include "engine.h"
#include "napi_util.h"

namespace mcprl {

namespace {

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

// What sample and step return, per slot (sample.h).
struct Sampled {
  std::vector<int32_t> tok, top_ids;
  std::vector<float> lp, slp, top_lps;
  int width = 0;
};
Napi::Value sampled(Napi::Env env, const Sampled& s) {
  auto o = Napi::Object::New(env);
  o.Set("tokens", i32_array(env, s.tok));
  o.Set("logprobs", f32_array(env, s.lp));
  o.Set("samplerLogprobs", f32_array(env, s.slp));
  o.Set("topWidth", Napi::Number::New(env, s.width));
  o.Set("topIds", i32_array(env, s.top_ids));
  o.Set("topLogprobs", f32_array(env, s.top_lps));
  return o;
}

}  // namespace

// slotCreate(capacity): number — reserves the slot's bytes under the KV budget (an error naming them when they do
// not fit); the cache is allocated lazily by the first task that uses it.
Napi::Value Engine::SlotCreate(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    std::lock_guard<std::mutex> g(st_->mu);
    int cap = (int)int_arg(info[0], "KV slot capacity", 1, kMaxInt);
    return Napi::Number::New(info.Env(), st_->create_slot(cap));
  });
}

Napi::Value Engine::SlotFree(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    std::lock_guard<std::mutex> g(st_->mu);
    int id = (int)int_arg(info[0], "KV slot", 0, kMaxInt);
    st_->free_slot(id);
    return info.Env().Undefined();
  });
}

// slotSeed(id, seed, stream): the slot's sampling RNG state = f(seed, stream).
Napi::Value Engine::SlotSeed(const Napi::CallbackInfo& info) {
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
Napi::Value Engine::Fork(const Napi::CallbackInfo& info) {
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
Napi::Value Engine::Prefill(const Napi::CallbackInfo& info) {
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

// sample(slots: Int32Array, sampling: BatchSampling (src/engine/native.ts: one entry per slot))
//   : Promise<{tokens, logprobs, samplerLogprobs, topWidth, topIds, topLogprobs}> (see sample.h)
Napi::Value Engine::Sample(const Napi::CallbackInfo& info) {
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
Napi::Value Engine::Step(const Napi::CallbackInfo& info) {
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

}  // namespace mcprl
