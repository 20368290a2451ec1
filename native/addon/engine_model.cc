// Engine's model bindings (engine.h): load the base model onto its backend, load and unload LoRA adapters, the
// weights' bytes, the backend's name, close.
#include <array>
#include <mutex>

#include "../backend/backend.h"
#include "../backend/cuda_loader.h"
#include "../core/common.h"
#include "../model/model.h"
#include "engine.h"
#include "napi_util.h"

namespace mcprl {

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

}  // namespace

// load(dir: string, spec: ModelSpec (src/hf/config.ts), threads: number (0: all cores),
//      weightDtype: 'auto' | 'f32' | 'bf16' (WeightMode, model.h; the default is src/engine/model.ts's),
//      backend: 'cpu' | 'cpu-staged' | 'cuda' (backend.h; cuda after cudaProbe loaded the library)): Promise<void>
Napi::Value Engine::Load(const Napi::CallbackInfo& info) {
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
Napi::Value Engine::LoadAdapter(const Napi::CallbackInfo& info) {
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
Napi::Value Engine::WeightBytes(const Napi::CallbackInfo& info) {
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

Napi::Value Engine::UnloadAdapter(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    std::lock_guard<std::mutex> g(st_->mu);
    st_->adapters.erase(str_arg(info[0], "adapter name"));
    st_->purge_stale_prefixes();
    return info.Env().Undefined();
  });
}

// backend(): the name of the Backend table the model runs on ('cpu', 'cpu-staged', 'cuda'; backend.h).
Napi::Value Engine::BackendName(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    std::lock_guard<std::mutex> g(st_->mu);
    return Napi::String::New(info.Env(), st_->model.be->name);
  });
}

Napi::Value Engine::Close(const Napi::CallbackInfo& info) {
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

}  // namespace mcprl
