// The forward pass: run-state allocation, KV-cache slots, Model::forward over segments, and the one
// layer_forward that inference and training (including its recompute mode) share.
#include <algorithm>

#include "model.h"

namespace mcprl {

void Model::reserve(RunState& rs, int T, int r, bool save_all) {
  if (T <= rs.T_cap && r <= rs.r_cap && save_all == rs.save_all && rs.memory.data) return;
  // Grow geometrically: decode asks for one more key every step and must not reallocate every step.
  auto grow = [](int want, int have) { return want <= have ? have : std::max(want, have + have / 2); };
  T = grow(T, rs.T_cap);
  r = grow(r, rs.r_cap);
  const ModelConfig& c = cfg;
  const size_t C = c.hidden, HD = (size_t)c.heads * c.head_dim, KD = (size_t)c.kv_heads * c.head_dim, I = c.inter;
  const size_t H = c.heads, Hkv = c.kv_heads, Tz = T, R = r;
  const size_t per_layer = Tz * (C * 4 + 3 + HD * 3 + H + Hkv + KD * 3 + I * 3 + H) + NUM_MODULES * Tz * R;
  const int nl = save_all ? c.layers : 1;
  const size_t total = per_layer * nl + Tz * (3 * C + 1);
  rs.memory.allocate(total, be->memory);
  float* p = rs.memory.data;
  auto take = [&](size_t n) { float* q = p; p += n; return q; };
  rs.layers.assign(c.layers, LayerActs{});
  for (int l = 0; l < nl; ++l) {
    LayerActs& a = rs.layers[l];
    a.x = take(Tz * C); a.xn1 = take(Tz * C); a.rstd1 = take(Tz);
    a.q_pre = take(Tz * HD); a.q = take(Tz * HD); a.q_rstd = take(Tz * H);
    a.k_pre = take(Tz * KD); a.k = take(Tz * KD); a.k_rstd = take(Tz * Hkv);
    a.v = take(Tz * KD); a.att = take(Tz * HD); a.lse = take(Tz * H);
    a.x2 = take(Tz * C); a.xn2 = take(Tz * C); a.rstd2 = take(Tz);
    a.gate = take(Tz * I); a.up = take(Tz * I); a.act = take(Tz * I);
    for (int m = 0; m < NUM_MODULES; ++m) a.xa[m] = take(Tz * R);
  }
  for (int l = nl; l < c.layers; ++l) rs.layers[l] = rs.layers[0];
  rs.xf = take(Tz * C); rs.hf = take(Tz * C); rs.rstdf = take(Tz); rs.tmp = take(Tz * C);
  rs.T_cap = T; rs.r_cap = r; rs.save_all = save_all;
}

void Model::slot_init(KVSlot& s, int cap) const {
  const size_t per = (size_t)cfg.layers * cap * cfg.kv_heads * cfg.head_dim;
  s.cap = cap;
  s.len = 0;
  s.k.allocate(per, be->memory);
  s.v.allocate(per, be->memory);
  s.last_h.assign(cfg.hidden, 0.0f);
  s.has_h = false;
}

void Model::slot_copy(KVSlot& dst, const KVSlot& src) const {
  CHECK(dst.cap >= src.len, "KV slot too small to copy into");
  const size_t row = (size_t)cfg.kv_heads * cfg.head_dim;
  for (int l = 0; l < cfg.layers; ++l) {
    be->copy(dst.k.data + (size_t)l * dst.cap * row, src.k.data + (size_t)l * src.cap * row, sizeof(float) * src.len * row);
    be->copy(dst.v.data + (size_t)l * dst.cap * row, src.v.data + (size_t)l * src.cap * row, sizeof(float) * src.len * row);
  }
  dst.len = src.len;
  dst.last_h = src.last_h;
  dst.has_h = src.has_h;
}

void Model::forward(const int32_t* tokens, int T, const std::vector<Segment>& segs, RunState& rs, bool save_all,
                    float* layer_inputs) {
  const ModelConfig& c = cfg;
  const int C = c.hidden;
  // Validate everything before any parallel region (see common.h).
  int rows = 0, max_r = 1;
  for (auto& s : segs) {
    CHECK(s.n > 0, "empty sequence");
    int past = s.slot ? s.slot->len : 0;
    if (s.slot) CHECK(past + s.n <= s.slot->cap, "KV cache slot overflow");
    CHECK(past + s.n <= c.max_pos, "sequence of " + std::to_string(past + s.n) + " tokens exceeds max_position_embeddings " + std::to_string(c.max_pos));
    if (s.adapter) max_r = std::max(max_r, s.adapter->r);
    rows += s.n;
  }
  CHECK(rows == T, "segment lengths do not add up to the token count");
  for (int t = 0; t < T; ++t)
    CHECK(tokens[t] >= 0 && tokens[t] < c.vocab, "token id " + std::to_string(tokens[t]) + " out of range [0, " + std::to_string(c.vocab) + ")");
  reserve(rs, T, max_r, save_all);
  rs.tokens.assign(tokens, tokens + T);
  rs.pos.resize(T);
  {
    int t = 0;
    for (auto& s : segs) {
      int past = s.slot ? s.slot->len : 0;
      for (int i = 0; i < s.n; ++i) rs.pos[t++] = past + i;
    }
  }
  const Backend& B = *be;
  rs.pos_ops = staged(B, rs.stage_pos, rs.pos.data(), T);
  B.embedding_forward(rs.layers[0].x, staged(B, rs.stage_tokens, tokens, T), w.wte, T, C);
  for (int l = 0; l < c.layers; ++l) {
    LayerActs& a = rs.layers[l];
    if (layer_inputs) B.copy(layer_inputs + (size_t)l * T * C, a.x, sizeof(float) * (size_t)T * C);
    // Without save_all every layer's views alias layer 0's, so x_next is a.x itself: the layer reads a.x for
    // the last time in x2 = x + attention, before it writes x_next.
    layer_forward(l, segs, a, rs, l + 1 < c.layers ? rs.layers[l + 1].x : rs.xf);
  }
  B.rmsnorm_forward(rs.hf, rs.rstdf, rs.xf, w.norm, T, C, c.eps);
  // Cache segments: advance the cache and keep the last row's hidden state for sampling.
  int row = 0;
  rs.last_rows.clear();
  for (auto& s : segs) {
    row += s.n;
    if (!s.slot) continue;
    s.slot->len += s.n;
    s.slot->has_h = true;
    rs.last_rows.push_back(row - 1);
  }
  if (rs.last_rows.empty()) return;
  const int n = (int)rs.last_rows.size();
  const float* last = rs.hf;  // on the host: read each row where it is
  if (B.memory) {             // elsewhere: gather the rows there and bring them back in one copy
    if (rs.stage_last.size < (size_t)n * C) rs.stage_last.allocate((size_t)n * C, B.memory);
    B.gather_rows(rs.stage_last.data, rs.hf, staged(B, rs.stage_last_rows, rs.last_rows.data(), n), n, C);
    rs.host_last.resize((size_t)n * C);
    B.download(rs.host_last.data(), rs.stage_last.data, sizeof(float) * n * C);
    last = rs.host_last.data();
  }
  int k = 0;
  for (auto& s : segs) {
    if (!s.slot) continue;
    const float* src = B.memory ? last + (size_t)k * C : last + (size_t)rs.last_rows[k] * C;
    std::copy(src, src + C, s.slot->last_h.begin());
    ++k;
  }
}

void Model::layer_forward(int l, const std::vector<Segment>& segs, LayerActs& a, RunState& rs, float* x_next) const {
  const ModelConfig& c = cfg;
  const Backend& B = *be;
  const int C = c.hidden, H = c.heads, Hkv = c.kv_heads, D = c.head_dim, I = c.inter;
  const int HD = H * D, KD = Hkv * D;
  int T = 0;
  for (auto& s : segs) T += s.n;
  const LayerWeights& lw = w.layers[l];

  // With a folded adapter (segments_fold) the projections read W + scale · B A and there is no LoRA term (its
  // backward needs no x Aᵀ, native/train/train.cc); else each LoRA term is added over runs of consecutive
  // segments that share an adapter.
  const LoraAdapter* fold = segments_fold(segs);
  auto W = [&](int m) { return proj_weight(w, fold, l, m); };
  auto lora = [&](int m, float* y, const float* x, float* xa, int in, int out) {
    if (fold) return;
    int row = 0;
    size_t si = 0;
    while (si < segs.size()) {
      const LoraAdapter* ad = segs[si].adapter;
      int start = row, n = 0;
      while (si < segs.size() && segs[si].adapter == ad) { n += segs[si].n; row += segs[si].n; ++si; }
      if (!ad || !ad->targets[m]) continue;
      B.lora_forward(y + (size_t)start * out, xa + (size_t)start * rs.r_cap, x + (size_t)start * in, ad->views[l][m], n, in, out);
    }
  };

  // attention block
  B.rmsnorm_forward(a.xn1, a.rstd1, a.x, lw.ln1, T, C, c.eps);
  B.linear_forward(a.q_pre, a.xn1, W(Q), lw.b[Q], T, C, HD);
  B.linear_forward(a.k_pre, a.xn1, W(K), lw.b[K], T, C, KD);
  B.linear_forward(a.v, a.xn1, W(V), lw.b[V], T, C, KD);
  lora(Q, a.q_pre, a.xn1, a.xa[Q], C, HD);
  lora(K, a.k_pre, a.xn1, a.xa[K], C, KD);
  lora(V, a.v, a.xn1, a.xa[V], C, KD);
  if (c.qk_norm) {
    B.rmsnorm_forward(a.q, a.q_rstd, a.q_pre, lw.q_norm, T * H, D, c.eps);
    B.rmsnorm_forward(a.k, a.k_rstd, a.k_pre, lw.k_norm, T * Hkv, D, c.eps);
  } else {
    B.copy(a.q, a.q_pre, sizeof(float) * (size_t)T * HD);
    B.copy(a.k, a.k_pre, sizeof(float) * (size_t)T * KD);
  }
  B.rope_forward(a.q, rs.pos_ops, inv_freq_ops(), T, H, D);
  B.rope_forward(a.k, rs.pos_ops, inv_freq_ops(), T, Hkv, D);
  std::vector<AttnSegment> as(segs.size());
  std::vector<RowCopy> to_cache;  // this layer's keys and values of the cache segments, appended in one call
  int row = 0;
  for (size_t s = 0; s < segs.size(); ++s) {
    const Segment& sg = segs[s];
    AttnSegment& at = as[s];
    at.q0 = row;
    at.nq = sg.n;
    if (sg.slot) {
      KVSlot& sl = *sg.slot;
      float* kc = sl.k.data + (size_t)l * sl.cap * KD;
      float* vc = sl.v.data + (size_t)l * sl.cap * KD;
      to_cache.push_back({kc + (size_t)sl.len * KD, a.k + (size_t)row * KD, (size_t)sg.n * KD});
      to_cache.push_back({vc + (size_t)sl.len * KD, a.v + (size_t)row * KD, (size_t)sg.n * KD});
      at.npast = sl.len;
      at.k = kc;
      at.v = vc;
    } else {
      at.npast = 0;
      at.k = a.k + (size_t)row * KD;
      at.v = a.v + (size_t)row * KD;
    }
    row += sg.n;
  }
  B.copy_rows(to_cache.data(), (int)to_cache.size());
  B.attention_forward(a.att, a.lse, a.q, as.data(), (int)as.size(), H, Hkv, D);
  B.linear_forward(rs.tmp, a.att, W(O), lw.b[O], T, HD, C);
  lora(O, rs.tmp, a.att, a.xa[O], HD, C);
  B.add(a.x2, a.x, rs.tmp, (long)T * C);
  // MLP block
  B.rmsnorm_forward(a.xn2, a.rstd2, a.x2, lw.ln2, T, C, c.eps);
  B.linear_forward(a.gate, a.xn2, W(GATE), nullptr, T, C, I);
  B.linear_forward(a.up, a.xn2, W(UP), nullptr, T, C, I);
  lora(GATE, a.gate, a.xn2, a.xa[GATE], C, I);
  lora(UP, a.up, a.xn2, a.xa[UP], C, I);
  B.swiglu_forward(a.act, a.gate, a.up, (long)T * I);
  B.linear_forward(rs.tmp, a.act, W(DOWN), nullptr, T, I, C);
  lora(DOWN, rs.tmp, a.act, a.xa[DOWN], I, C);
  B.add(x_next, a.x2, rs.tmp, (long)T * C);
}

}  // namespace mcprl
