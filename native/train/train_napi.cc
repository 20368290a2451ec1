// N-API bindings of the training half (native/train). The trainer shares the engine's state (model, adapter
// registry, mutex: engine_state.h) and the boundary's helpers (napi_util.h). Registered from InitAll with
// init_train(env, exports).
//
// JS surface:
//   new Trainer(engine, name, r, alpha, rslora, targets: string[])  creates a zero adapter registered in the
//       engine under `name`, so generate/score use the newest weights without a reload
//   trainer.layout(): {key, offset, rows, cols}[]   PEFT key order (layer, module, A then B)
//   trainer.read(which): Float32Array               which: 'params' | 'grads' | 'exp_avg' | 'exp_avg_sq' (copy)
//   trainer.write(which, data: Float32Array)
//   trainer.run(microBatches, loss, optim | null, wantLogprobs, recompute, foldLora): Promise<RunResult>
//       zeroes the gradient, runs every micro-batch (forward, loss, backward; gradients accumulate), then
//       with optim: clips the global grad norm and takes one AdamW step. foldLora (CPU only): the projections
//       read W + scale · B A, folded once at the start of the run (model.h lora_fold). optim.lr is the step's
//       own (the caller's schedule: src/train/step-settings.ts)
#include "train_napi.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>

#include "../engine/engine_state.h"
#include "../addon/napi_util.h"
#include "loss.h"
#include "optim.h"
#include "train.h"

namespace mcprl {

namespace {

struct TrainerState {
  std::shared_ptr<EngineState> eng;
  std::string name;
  LoraAdapter* adapter = nullptr;  // owned by eng->adapters[name]
  FloatBuffer grad, m, v;          // same layout as adapter->memory
  TrainWork work;

  // The adapter object registered under our name; fails if it was unloaded or replaced meanwhile.
  LoraAdapter& live() {
    eng->begin();
    auto it = eng->adapters.find(name);
    CHECK(it != eng->adapters.end() && it->second.get() == adapter,
          "trainable adapter '" + name + "' was unloaded or replaced in the engine");
    return *adapter;
  }
  float* buffer(const std::string& which) {
    if (which == "params") return live().memory.data;
    live();
    if (which == "grads") return grad.data;
    if (which == "exp_avg") return m.data;
    if (which == "exp_avg_sq") return v.data;
    FAIL("unknown trainer buffer '" + which + "'");
  }
};

class Trainer : public Napi::ObjectWrap<Trainer> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "Trainer",
                       {InstanceMethod("layout", &Trainer::Layout), InstanceMethod("read", &Trainer::Read),
                        InstanceMethod("write", &Trainer::Write), InstanceMethod("run", &Trainer::Run)});
  }

  explicit Trainer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Trainer>(info), st_(std::make_shared<TrainerState>()) {
    try {
      st_->eng = engine_state_of(info[0]);
      st_->name = str_arg(info[1], "Trainer name");
      int r = (int)int_arg(info[2], "Trainer r", 1, kMaxRank);
      float alpha = (float)num_arg(info[3], "Trainer alpha");
      bool rslora = bool_arg(info[4], "Trainer rslora");
      auto names = to_names(info[5], "targets");
      bool targets[NUM_MODULES] = {};
      for (auto& n : names) {
        int found = module_index(n);
        CHECK(found >= 0, "unsupported LoRA target module '" + n + "'");
        targets[found] = true;
      }
      CHECK(!st_->name.empty(), "adapter name must not be empty");
      std::lock_guard<std::mutex> g(st_->eng->mu);
      st_->eng->begin();
      CHECK(st_->eng->loaded, "model not loaded");
      CHECK(!st_->eng->adapters.count(st_->name), "an adapter named '" + st_->name + "' is already loaded");
      auto a = std::make_unique<LoraAdapter>();
      a->name = st_->name;
      lora_allocate(*a, st_->eng->model.cfg, r, alpha, rslora, targets);
      // The adapter, its gradient and the optimiser's moments live where the model does.
      const Backend& be = *st_->eng->model.be;
      if (be.memory) lora_to_backend(*a, be);
      st_->grad.allocate(a->memory.size, be.memory);
      st_->m.allocate(a->memory.size, be.memory);
      st_->v.allocate(a->memory.size, be.memory);
      st_->adapter = a.get();
      st_->eng->adapters[st_->name] = std::move(a);
    } catch (const Napi::Error&) {
      throw;
    } catch (const std::exception& ex) {
      throw Napi::Error::New(info.Env(), ex.what());
    }
  }

 private:
  std::shared_ptr<TrainerState> st_;

  Napi::Value Layout(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::lock_guard<std::mutex> g(st_->eng->mu);
      LoraAdapter& a = st_->live();
      auto arr = Napi::Array::New(info.Env(), a.tensors.size());
      for (size_t i = 0; i < a.tensors.size(); ++i) {
        auto o = Napi::Object::New(info.Env());
        o.Set("key", a.tensors[i].key);
        o.Set("offset", (double)(a.tensors[i].data - a.memory.data));
        o.Set("rows", a.tensors[i].rows);
        o.Set("cols", a.tensors[i].cols);
        arr.Set((uint32_t)i, o);
      }
      return arr;
    });
  }

  Napi::Value Read(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      std::lock_guard<std::mutex> g(st_->eng->mu);
      const float* p = st_->buffer(str_arg(info[0], "which"));
      size_t n = st_->adapter->memory.size;
      auto out = Napi::Float32Array::New(info.Env(), n);
      st_->eng->model.be->download(out.Data(), p, sizeof(float) * n);  // a checkpoint's one copy per buffer
      return out;
    });
  }

  Napi::Value Write(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      auto src = to_f32(info[1], "data");
      std::lock_guard<std::mutex> g(st_->eng->mu);
      float* p = st_->buffer(str_arg(info[0], "which"));
      CHECK(src.size() == st_->adapter->memory.size, "trainer buffer size mismatch: got " + std::to_string(src.size()) +
                                                        " floats, expected " + std::to_string(st_->adapter->memory.size));
      st_->eng->model.be->upload(p, src.data(), sizeof(float) * src.size());
      if (p == st_->adapter->memory.data) st_->adapter->version = new_weights_version();
      return info.Env().Undefined();
    });
  }

  // run(microBatches: {tokens, cuSeqlens, lossRows, lossTargets, oldLogprobs|null, isWeights|null, lossInvTemp|null,
  //     lossMaskIdx|null, masks|null, seqOff, seqN, seqAdv,
  //     seqWeight}[], loss: {kind, epsLow, epsHigh, beta, cispoEpsMax}, optim: {lr, beta1, beta2, eps,
  //     weightDecay, maxGradNorm, step} | null, wantLogprobs: boolean, recompute: boolean, foldLora: boolean);
  //     every field required
  // -> Promise<{loss, policyLoss, klSum, ratioSum, clipped, tokens, nllSum, entropySum, gradNorm, seconds,
  //             logprobs?: Float32Array (every micro-batch's loss tokens, in order)}>
  Napi::Value Run(const Napi::CallbackInfo& info) {
    return guard(info, [&]() -> Napi::Value {
      Napi::Env env = info.Env();
      if (!info[0].IsArray()) throw Napi::TypeError::New(env, "microBatches must be an array");
      auto arr = info[0].As<Napi::Array>();
      auto mbs = std::make_shared<std::vector<MicroBatch>>(arr.Length());
      size_t total_m = 0;
      for (uint32_t i = 0; i < arr.Length(); ++i) {
        Napi::Object o = arr.Get(i).As<Napi::Object>();
        MicroBatch& mb = (*mbs)[i];
        mb.tokens = to_i32(o.Get("tokens"), "tokens");
        auto cu = to_i32(o.Get("cuSeqlens"), "cuSeqlens");
        mb.cu_seqlens.assign(cu.begin(), cu.end());
        mb.loss_rows = to_i32(o.Get("lossRows"), "lossRows");
        mb.loss_targets = to_i32(o.Get("lossTargets"), "lossTargets");
        Napi::Value old = o.Get("oldLogprobs");
        if (!old.IsNull() && !old.IsUndefined()) mb.old_logp = to_f32(old, "oldLogprobs");
        Napi::Value isw = o.Get("isWeights");
        if (!isw.IsNull() && !isw.IsUndefined()) mb.is_weight = to_f32(isw, "isWeights");
        Napi::Value it = o.Get("lossInvTemp");
        if (!it.IsNull() && !it.IsUndefined()) mb.loss_inv_temp = to_f32(it, "lossInvTemp");
        TokenMasks tm = to_masks(o.Get("lossMaskIdx"), o.Get("masks"), "microBatch");
        mb.loss_mask_idx = std::move(tm.idx);
        mb.masks = std::move(tm.bits);
        auto off = to_i32(o.Get("seqOff"), "seqOff"), n = to_i32(o.Get("seqN"), "seqN");
        auto adv = to_f32(o.Get("seqAdv"), "seqAdv"), wt = to_f32(o.Get("seqWeight"), "seqWeight");
        CHECK(off.size() == n.size() && adv.size() == n.size() && wt.size() == n.size(), "sequence arrays differ in length");
        CHECK(mb.loss_rows.size() == mb.loss_targets.size(), "lossRows and lossTargets differ in length");
        mb.seqs.resize(n.size());
        for (size_t s = 0; s < n.size(); ++s) {
          CHECK(off[s] >= 0 && n[s] >= 0 && (size_t)off[s] + n[s] <= mb.loss_rows.size(), "sequence loss span out of range");
          mb.seqs[s] = LossSeq{off[s], n[s], adv[s], wt[s]};
        }
        total_m += mb.loss_rows.size();
      }
      // Every field is required: the defaults live in the TypeScript schemas (src/engine/train-types.ts).
      Napi::Object lo = obj_arg(info[1], "loss");
      LossParams lp{};
      std::string kind = str_field(lo, "loss", "kind");
      const char* kinds[] = {"grpo", "dapo", "dr_grpo", "cispo", "gspo", "sft"};
      lp.kind = -1;
      for (int k = 0; k < 6; ++k) if (kind == kinds[k]) lp.kind = k;
      CHECK(lp.kind >= 0, "unknown loss kind '" + kind + "'");
      lp.eps_low = (float)num_field(lo, "loss", "epsLow");
      lp.eps_high = (float)num_field(lo, "loss", "epsHigh");
      lp.beta = (float)num_field(lo, "loss", "beta");
      lp.cispo_eps_max = (float)num_field(lo, "loss", "cispoEpsMax");
      const bool step = !info[2].IsNull();
      AdamWConfig ac{};
      float lr = 0.0f;
      double max_norm = 0;
      long step_no = 0;
      if (step) {
        Napi::Object oo = obj_arg(info[2], "optim");
        lr = (float)num_field(oo, "optim", "lr");
        ac.beta1 = (float)num_field(oo, "optim", "beta1");
        ac.beta2 = (float)num_field(oo, "optim", "beta2");
        ac.eps = (float)num_field(oo, "optim", "eps");
        ac.weight_decay = (float)num_field(oo, "optim", "weightDecay");
        max_norm = num_field(oo, "optim", "maxGradNorm");
        step_no = (long)int_field(oo, "optim", "step", 1, kMaxSafeInt);
      }
      const bool want_lp = bool_arg(info[3], "wantLogprobs");
      const bool recompute = bool_arg(info[4], "recompute");
      const bool fold = bool_arg(info[5], "foldLora");
      CHECK(!fold || !st_->eng->model.be->memory, "foldLora: the CPU backend only (the folded weights live in host memory)");
      struct Out {
        MicroResult sum;
        double grad_norm = 0, seconds = 0;
        std::vector<float> logp;
      };
      auto out = std::make_shared<Out>();
      auto st = st_;
      return run_async(
          env,
          [st, mbs, lp, step, ac, lr, max_norm, step_no, want_lp, recompute, fold, total_m, out] {
            std::lock_guard<std::mutex> g(st->eng->mu);
            LoraAdapter& a = st->live();
            auto t0 = std::chrono::steady_clock::now();
            const size_t n = a.memory.size;
            const Backend& be = *st->eng->model.be;
            be.zero(st->grad.data, sizeof(float) * n);
            if (!fold) a.folded.clear();
            else if (a.folded.empty() || a.fold_version != a.version) lora_fold(a, st->eng->model.cfg, st->eng->model.w);
            if (want_lp) out->logp.assign(total_m, 0.0f);
            size_t lp_off = 0;
            for (const MicroBatch& mb : *mbs) {
              MicroResult r = train_micro_batch(st->eng->model, &a, st->grad.data, mb, lp, st->work,
                                                want_lp ? out->logp.data() + lp_off : nullptr, recompute);
              lp_off += mb.loss_rows.size();
              LossStats& s = out->sum.loss;
              s.loss += r.loss.loss; s.policy_loss += r.loss.policy_loss; s.kl_sum += r.loss.kl_sum;
              s.ratio_sum += r.loss.ratio_sum; s.clipped += r.loss.clipped; s.tokens += r.loss.tokens;
              s.nll_sum += r.loss.nll_sum;
              out->sum.entropy_sum += r.entropy_sum;
            }
            if (step) {
              out->grad_norm = max_norm > 0 ? clip_grad_norm(be, st->grad.data, n, max_norm) : be.norm(st->grad.data, n);
              be.adamw(a.memory.data, st->grad.data, st->m.data, st->v.data, n, step_no, lr, ac);
              a.version = new_weights_version();
            } else {
              out->grad_norm = be.norm(st->grad.data, n);
            }
            out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          },
          [out, want_lp](Napi::Env env) -> Napi::Value {
            auto o = Napi::Object::New(env);
            const LossStats& s = out->sum.loss;
            o.Set("loss", s.loss);
            o.Set("policyLoss", s.policy_loss);
            o.Set("klSum", s.kl_sum);
            o.Set("ratioSum", s.ratio_sum);
            o.Set("clipped", s.clipped);
            o.Set("tokens", s.tokens);
            o.Set("nllSum", s.nll_sum);
            o.Set("entropySum", out->sum.entropy_sum);
            o.Set("gradNorm", out->grad_norm);
            o.Set("seconds", out->seconds);
            if (want_lp) o.Set("logprobs", f32_array(env, out->logp));
            return o;
          });
    });
  }
};

}  // namespace

void init_train(Napi::Env env, Napi::Object exports) {
  exports.Set("Trainer", Trainer::Init(env));
}

}  // namespace mcprl
