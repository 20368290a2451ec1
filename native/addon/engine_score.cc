// Engine's score binding (engine.h): each sequence's log-probabilities under the base model or an adapter, as the
// trainer's loss computes them.
#include <cmath>
#include <mutex>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../model/model.h"
#include "../ops/lm_head.h"
#include "engine.h"
#include "napi_util.h"

namespace mcprl {

namespace {

// Score's arguments against the model: lengths that add up to the token count, one temperature (positive) and one
// mask index (in range) per token when given.
void check_score_args(const EngineState& st, const std::vector<int32_t>& tokens, const std::vector<int32_t>& lens,
                      const std::vector<float>& inv_temp, const TokenMasks& tm) {
  size_t total = 0;
  for (int n : lens) { CHECK(n >= 0, "negative sequence length"); total += n; }
  CHECK(total == tokens.size(), "sequence lengths do not add up to the token count");
  const size_t words = ((size_t)st.model.cfg.vocab + 31) / 32;
  CHECK(inv_temp.empty() || inv_temp.size() == tokens.size(), "invTemp must have one entry per token");
  const std::vector<int32_t>* mask_idx = &tm.idx;
  CHECK(mask_idx->empty() || mask_idx->size() == tokens.size(), "maskIdx must have one entry per token");
  for (float it : inv_temp) CHECK(it > 0.0f && std::isfinite(it), "temperatures must be positive");
  for (int32_t k : *mask_idx) CHECK(k < 0 || ((size_t)k + 1) * words <= tm.bits.size(), "token mask index out of range");
}

// One forward of the T tokens from `start` (the sequences segs), then each token's log-probability into out.
void score_rows(EngineState& st, const std::vector<int32_t>& tokens, size_t start, int T, const std::vector<Segment>& segs,
                const std::vector<float>& inv_temp, const TokenMasks& tm, std::vector<float>& scratch, std::vector<float>& out) {
  Model& m = st.model;
  const int C = m.cfg.hidden, V = m.cfg.vocab;
  const std::vector<int32_t>& mask_idx = tm.idx;
  const int chunk = lm_head_chunk_rows(V, T);
  m.forward(tokens.data() + start, T, segs, st.rs, false, nullptr);
  std::vector<int32_t> tg(T, 0);
  for (int t = 0; t + 1 < T; ++t) tg[t] = tokens[start + t + 1];
  // Row t predicts token start + t + 1: it takes that token's temperature and allowed set. The last row
  // of a segment predicts nothing kept (its target is 0 or the next segment's first token).
  std::vector<float> it_rows(inv_temp.empty() ? 0 : T, 1.0f);
  std::vector<int32_t> mi_rows(mask_idx.empty() ? 0 : T, -1);
  for (int t = 0; t + 1 < T; ++t) {
    if (!it_rows.empty()) it_rows[t] = inv_temp[start + t + 1];
    if (!mi_rows.empty()) mi_rows[t] = mask_idx[start + t + 1];
  }
  // The two-pass head's logits (up to 64 MiB, zeroed by the resize): not when the fused path takes the call.
  const bool two_pass = !lm_head_fused_applies(T, C, V, mi_rows.empty() ? nullptr : mi_rows.data());
  if (two_pass && scratch.size() < lm_head_scratch_floats(V, T)) scratch.resize(lm_head_scratch_floats(V, T));
  std::vector<float> lp(T), lse(T);
  const Backend& be = *m.be;
  if (!be.memory) {
    be.lm_head_forward(lp.data(), lse.data(), nullptr, nullptr, st.rs.hf, m.w.lm_head, tg.data(), T, C, V, scratch.data(), chunk,
                       it_rows.empty() ? nullptr : it_rows.data(), mi_rows.empty() ? nullptr : mi_rows.data(),
                       mi_rows.empty() ? nullptr : tm.bits.data());
  } else {
    // Elsewhere: the targets, temperatures and masks go there, the log-probabilities come back.
    ScoreStage& sg = st.score_stage;
    if (sg.lp.size < (size_t)T) sg.lp.allocate(T, be.memory), sg.lse.allocate(T, be.memory);
    if (two_pass && sg.scratch.size < scratch.size()) sg.scratch.allocate(scratch.size(), be.memory);
    be.lm_head_forward(sg.lp.data, sg.lse.data, nullptr, nullptr, st.rs.hf, m.w.lm_head, staged(be, sg.targets, tg.data(), T), T, C,
                       V, two_pass ? sg.scratch.data : nullptr, chunk,
                       it_rows.empty() ? nullptr : staged(be, sg.inv_temp, it_rows.data(), T),
                       mi_rows.empty() ? nullptr : staged(be, sg.mask_idx, mi_rows.data(), T),
                       mi_rows.empty() ? nullptr : staged(be, sg.masks, tm.bits.data(), tm.bits.size()));
    be.download(lp.data(), sg.lp.data, sizeof(float) * T);
  }
  size_t row = 0;
  for (auto& s : segs) {
    for (int t = 1; t < s.n; ++t) out[start + row + t] = lp[row + t - 1];
    row += s.n;
  }
}

}  // namespace

// score(tokens: Int32Array, lens: Int32Array, adapter: string|null,
//       invTemp?: Float32Array|null, maskIdx?: Int32Array|null, masks?: Uint32Array|null): Promise<Float32Array>
// Output aligned with tokens: out[start] = 0, out[start + t] = log p(tok[t] | tok[<t]). invTemp and maskIdx,
// when given, are aligned with tokens too: token t's log p is of softmax(logits × invTemp[t]) renormalised over
// the allowed set masks[maskIdx[t]] (ceil(V / 32) words each; −1: the whole vocabulary), as the trainer's loss
// computes it, so that a sampler's tempered, constrained logprobs can be compared with the trainer's own.
Napi::Value Engine::Score(const Napi::CallbackInfo& info) {
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
          check_score_args(*st, *tokens, lens, *inv_temp, *tm);
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
            score_rows(*st, *tokens, start, T, segs, *inv_temp, *tm, scratch, *out);
          }
        },
        [out](Napi::Env env) -> Napi::Value { return f32_array(env, *out); });
  });
}

}  // namespace mcprl
