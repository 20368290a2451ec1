// Forward + loss + backward of one packed micro-batch (see train.h).
#include "train.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../ops/lm_head.h"

namespace mcprl {

// Rows of LM-head logits held at once: lm_head_chunk_rows (ops/lm_head.h).
static void work_reserve(TrainWork& w, const Backend& B, const ModelConfig& c, int T, int M, int r) {
  int chunk = lm_head_chunk_rows(c.vocab, std::max(M, 1));
  if (T <= w.T_cap && M <= w.M_cap && r <= w.r_cap && chunk <= w.chunk && w.memory.data) return;
  T = std::max(T, w.T_cap);
  M = std::max(M, w.M_cap);
  r = std::max(r, w.r_cap);
  chunk = std::max(chunk, w.chunk);
  const size_t C = c.hidden, I = c.inter, HD = (size_t)c.heads * c.head_dim, KD = (size_t)c.kv_heads * c.head_dim;
  const size_t Tz = T, Mz = std::max(M, 1);
  const size_t total = Tz * C * 3 + Tz * I * 3 + Tz * HD * 3 + Tz * KD * 3 + Tz * r +
                       Mz * C * 3 + Mz * 5 + (size_t)chunk * lm_head_tile_cols(c.vocab);
  w.memory.allocate(total, B.memory);
  float* p = w.memory.data;
  auto take = [&](size_t n) { float* q = p; p += n; return q; };
  w.dres = take(Tz * C); w.dxn = take(Tz * C); w.dtmp = take(Tz * C);
  w.dact = take(Tz * I); w.dgate = take(Tz * I); w.dup = take(Tz * I);
  w.datt = take(Tz * HD); w.dq = take(Tz * HD); w.dqpre = take(Tz * HD);
  w.dk = take(Tz * KD); w.dkpre = take(Tz * KD); w.dv = take(Tz * KD);
  w.dh = take(Tz * r);
  w.hsel = take(Mz * C); w.dhsel = take(Mz * C); w.lm_g = take(Mz * C);
  w.logp = take(Mz); w.lse = take(Mz); w.ent = take(Mz); w.dlogp = take(Mz); w.ref = take(Mz);
  w.lm_scratch = take((size_t)chunk * lm_head_tile_cols(c.vocab));
  w.T_cap = T; w.M_cap = M; w.r_cap = r; w.chunk = chunk;
}

// The loss tokens' rows, targets, temperatures and masks where the backend's ops read them (null: absent).
struct LossTokens {
  const int32_t *rows, *targets, *mask_idx;
  const float* inv_temp;
  const uint32_t* masks;
};

static LossTokens stage_loss_tokens(const Backend& B, TrainWork& w, const MicroBatch& mb) {
  const size_t M = mb.loss_rows.size();
  LossTokens t;
  t.rows = staged(B, w.stage_rows, mb.loss_rows.data(), M);
  t.targets = staged(B, w.stage_targets, mb.loss_targets.data(), M);
  t.inv_temp = mb.loss_inv_temp.empty() ? nullptr : staged(B, w.stage_inv_temp, mb.loss_inv_temp.data(), M);
  t.mask_idx = mb.loss_mask_idx.empty() ? nullptr : staged(B, w.stage_mask_idx, mb.loss_mask_idx.data(), M);
  t.masks = staged(B, w.stage_masks, mb.masks.data(), mb.masks.size());
  return t;
}

// n values of the backend's memory readable on the host: src itself on the CPU, else a copy in `host`.
static const float* host_view(const Backend& B, std::vector<float>& host, const float* src, int n) {
  if (!B.memory) return src;
  host.resize(n);
  B.download(host.data(), src, sizeof(float) * n);
  return host.data();
}

// Log-probabilities (and entropies) of the loss tokens from the final hidden rows of the last forward;
// with g, also what the LM-head backward needs (ops/lm_head.h).
static void loss_token_logprobs(const Model& m, const RunState& rs, const MicroBatch& mb, const LossTokens& lt,
                                TrainWork& w, float* logp, float* lse, float* ent, float* g) {
  const int M = (int)mb.loss_rows.size(), C = m.cfg.hidden;
  if (M == 0) return;
  m.be->gather_rows(w.hsel, rs.hf, lt.rows, M, C);
  m.be->lm_head_forward(logp, lse, ent, g, w.hsel, m.w.lm_head, lt.targets, M, C, m.cfg.vocab, w.lm_scratch,
                        lm_head_chunk_rows(m.cfg.vocab, M), lt.inv_temp, lt.mask_idx, lt.masks);
}

MicroResult train_micro_batch(Model& m, const LoraAdapter* a, float* grad, const MicroBatch& mb, const LossParams& p,
                              TrainWork& w, float* logp_out, bool recompute) {
  const ModelConfig& c = m.cfg;
  const Backend& B = *m.be;
  const int T = (int)mb.tokens.size(), M = (int)mb.loss_rows.size(), nseq = (int)mb.cu_seqlens.size() - 1;
  const int C = c.hidden, H = c.heads, Hkv = c.kv_heads, D = c.head_dim, I = c.inter, HD = H * D, KD = Hkv * D;
  CHECK(T > 0 && nseq > 0 && mb.cu_seqlens.front() == 0 && mb.cu_seqlens.back() == T, "bad micro-batch packing");
  CHECK(mb.old_logp.empty() || (int)mb.old_logp.size() == M, "old log-probabilities do not match the loss tokens");
  CHECK(mb.is_weight.empty() || (int)mb.is_weight.size() == M, "importance weights do not match the loss tokens");
  CHECK(mb.loss_inv_temp.empty() || (int)mb.loss_inv_temp.size() == M, "temperatures do not match the loss tokens");
  CHECK(mb.loss_mask_idx.empty() || (int)mb.loss_mask_idx.size() == M, "token masks do not match the loss tokens");
  {
    const size_t words = ((size_t)c.vocab + 31) / 32;
    for (int32_t k : mb.loss_mask_idx)
      CHECK(k < 0 || ((size_t)k + 1) * words <= mb.masks.size(), "token mask index out of range");
    for (float it : mb.loss_inv_temp) CHECK(it > 0.0f && std::isfinite(it), "temperatures must be positive");
  }
  for (int j = 0; j < M; ++j) {
    CHECK(mb.loss_rows[j] >= 0 && mb.loss_rows[j] < T, "loss row out of range");
    CHECK(mb.loss_targets[j] >= 0 && mb.loss_targets[j] < c.vocab, "loss target token out of range");
  }
  const int r = a ? a->r : 1;
  work_reserve(w, B, c, T, M, r);
  const LossTokens lt = stage_loss_tokens(B, w, mb);

  std::vector<Segment> segs(nseq);
  for (int s = 0; s < nseq; ++s) segs[s].n = mb.cu_seqlens[s + 1] - mb.cu_seqlens[s];

  // Reference (adapter-free) log-probabilities for the KL term.
  const bool need_ref = p.beta > 0.0f && p.kind != LOSS_SFT;
  if (need_ref) {
    m.forward(mb.tokens.data(), T, segs, w.rs_ref, false, nullptr);
    loss_token_logprobs(m, w.rs_ref, mb, lt, w, w.ref, w.lse, nullptr, nullptr);
  }

  // Policy forward, saving every layer's activations when a backward follows.
  for (auto& s : segs) s.adapter = a;
  const bool backward = grad != nullptr;
  recompute = recompute && backward;
  RunState& rs = recompute ? w.rs_rc : w.rs;
  if (recompute) {
    // Keep only each layer's input (rs_rc shares one layer's activations between all layers).
    if (w.ckpt.size < (size_t)c.layers * T * C) w.ckpt.allocate((size_t)c.layers * T * C, B.memory);
    m.forward(mb.tokens.data(), T, segs, rs, false, w.ckpt.data);
  } else {
    m.forward(mb.tokens.data(), T, segs, rs, backward, nullptr);
  }
  loss_token_logprobs(m, rs, mb, lt, w, w.logp, w.lse, w.ent, backward ? w.lm_g : nullptr);

  // The loss runs on the host over the M loss tokens; dlogp goes back to the backend's memory.
  const float* logp = host_view(B, w.host_logp, w.logp, M);
  const float* ent = host_view(B, w.host_ent, w.ent, M);
  const float* ref = need_ref ? host_view(B, w.host_ref, w.ref, M) : nullptr;
  if (B.memory) w.host_dlogp.resize(M);
  float* dlogp = B.memory ? w.host_dlogp.data() : w.dlogp;
  if (logp_out && M) std::memcpy(logp_out, logp, sizeof(float) * M);

  MicroResult res;
  for (int j = 0; j < M; ++j) res.entropy_sum += ent[j];
  loss_forward_backward(&res.loss, dlogp, logp, mb.old_logp.empty() ? nullptr : mb.old_logp.data(),
                        mb.is_weight.empty() ? nullptr : mb.is_weight.data(), ref, mb.seqs.data(), (int)mb.seqs.size(),
                        p);
  if (!backward || M == 0 || !a) return res;
  if (B.memory) B.upload(w.dlogp, dlogp, sizeof(float) * M);

  // LM head + log-softmax backward (the head is frozen), scattered back to the loss rows.
  B.lm_head_backward(w.dhsel, w.dlogp, w.lm_g, m.w.lm_head, lt.targets, M, C, lt.inv_temp);
  B.zero(w.dtmp, sizeof(float) * (size_t)T * C);
  B.scatter_add_rows(w.dtmp, w.dhsel, lt.rows, M, C);
  // Final norm (frozen weight).
  B.rmsnorm_backward(w.dres, nullptr, w.dtmp, rs.xf, m.w.norm, rs.rstdf, T, C);

  auto G = [&](const float* view) { return grad + (view - a->memory.data); };
  // Base projection backward (dx = dy W, overwritten) plus the LoRA term (dx +=, dA/dB +=). A folded adapter
  // (CPU): W already holds scale · B A, so dx needs no LoRA term, and A and B take their gradients from the
  // dense one, Gw = dyᵀ x: dB += scale · Gw Aᵀ, dA += scale · Bᵀ Gw (the same sums as dyᵀ (x Aᵀ) and (dy B)ᵀ x,
  // associated the other way: one product of T rows instead of three).
  const LoraAdapter* fold = segments_fold(segs);
  auto proj_backward = [&](int l, int mod, float* dx, const float* dy, const float* x, int in, int out, bool accumulate) {
    const WeightRef W = proj_weight(m.w, fold, l, mod);
    if (accumulate) B.gemm_w(false, T, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in);
    else B.linear_backward(dx, dy, W, T, in, out);
    if (!a->targets[mod]) return;
    const LoraView& v = a->views[l][mod];
    if (!fold) return B.lora_backward(dx, G(v.A), G(v.B), w.dh, dy, x, rs.layers[l].xa[mod], v, T, in, out);
    w.fold_gw.resize((size_t)out * in);
    float* gw = w.fold_gw.data();
    B.gemm(true, false, out, in, T, 1.0f, dy, out, x, in, 0.0f, gw, in);
    B.gemm(false, true, out, v.r, in, v.scale, gw, in, v.A, in, 1.0f, G(v.B), v.r);
    B.gemm(true, false, v.r, in, out, v.scale, v.B, v.r, gw, in, 1.0f, G(v.A), in);
  };

  for (int l = c.layers - 1; l >= 0; --l) {
    if (recompute) {
      LayerActs& r = rs.layers[0];
      B.copy(r.x, w.ckpt.data + (size_t)l * T * C, sizeof(float) * (size_t)T * C);
      m.layer_forward(l, segs, r, rs, rs.tmp);  // x_next is not needed: write it to scratch
    }
    const LayerActs& s = recompute ? rs.layers[0] : rs.layers[l];
    const LayerWeights& lw = m.w.layers[l];
    // MLP block: x_next = x2 + down(silu(gate) * up); w.dres holds d x_next.
    proj_backward(l, DOWN, w.dact, w.dres, s.act, I, C, false);
    B.swiglu_backward(w.dgate, w.dup, w.dact, s.gate, s.up, (long)T * I);
    proj_backward(l, GATE, w.dxn, w.dgate, s.xn2, C, I, false);
    proj_backward(l, UP, w.dxn, w.dup, s.xn2, C, I, true);
    B.rmsnorm_backward(w.dtmp, nullptr, w.dxn, s.x2, lw.ln2, s.rstd2, T, C);
    B.add(w.dres, w.dres, w.dtmp, (long)T * C);  // now d x2
    // Attention block: x2 = x + o_proj(attention(rope(norm(q)), rope(norm(k)), v)).
    proj_backward(l, O, w.datt, w.dres, s.att, HD, C, false);
    B.attention_backward(w.dq, w.dk, w.dv, w.datt, s.q, s.k, s.v, s.att, s.lse, mb.cu_seqlens.data(), nseq, H, Hkv,
                         D);
    B.rope_backward(w.dq, rs.pos_ops, m.inv_freq_ops(), T, H, D);
    B.rope_backward(w.dk, rs.pos_ops, m.inv_freq_ops(), T, Hkv, D);
    const float* dqp = w.dq;
    const float* dkp = w.dk;
    if (c.qk_norm) {
      B.rmsnorm_backward(w.dqpre, nullptr, w.dq, s.q_pre, lw.q_norm, s.q_rstd, T * H, D);
      B.rmsnorm_backward(w.dkpre, nullptr, w.dk, s.k_pre, lw.k_norm, s.k_rstd, T * Hkv, D);
      dqp = w.dqpre;
      dkp = w.dkpre;
    }
    proj_backward(l, Q, w.dxn, dqp, s.xn1, C, HD, false);
    proj_backward(l, K, w.dxn, dkp, s.xn1, C, KD, true);
    proj_backward(l, V, w.dxn, w.dv, s.xn1, C, KD, true);
    B.rmsnorm_backward(w.dtmp, nullptr, w.dxn, s.x, lw.ln1, s.rstd1, T, C);
    B.add(w.dres, w.dres, w.dtmp, (long)T * C);  // now d x (the layer's input)
  }
  return res;
}

}  // namespace mcprl
