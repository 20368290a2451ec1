// The LM head + log-softmax (see lm_head.h).
#include "lm_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../fastmath.h"
#include "../gemm.h"

namespace mcprl {

void logits_forward(float* z, const float* h, WeightRef W, int N, int C, int V) {
  gemm_w(true, N, V, C, 1.0f, h, C, W, C, 0.0f, z, V);
}

namespace {

// One row's log-sum-exp so far, over the vocabulary tiles seen: sums relative to the running max mx.
struct RowState {
  double sum, wsum;  // Σ e, Σ e (z − mx)
  float mx, zt;      // running max of the tempered, allowed logits; the target's tempered logit
  float resc;        // this tile's rescale factor for the row of g (1 / Σ e once the row is done)
};

// Row n's tile of logits z (columns [v0, v0 + vc) of the vocabulary) into the row's state: tempered, masked, the
// running max moved to the tile's, z overwritten with e = exp(z − mx) (0 outside the allowed set), the sums
// rescaled and the tile's added. Within the tile, float partial sums over blocks of 1024 columns, added in double.
void tile_row(RowState& st, float* z, int v0, int vc, int target, float ts, const uint32_t* allow) {
  auto allowed = [allow](int v) { return (bool)((allow[v >> 5] >> (v & 31)) & 1u); };
  // Passes over the row's logits are what this op adds to its two GEMMs, so the temperature rides on the max pass,
  // in 8 lanes (GCC leaves a max reduction scalar: one dependent vmaxss per logit); a max is exact, so the lanes
  // find the serial pass's value. Allowed sets: 8 bits of the set per 8 logits where they sit in one word.
  typedef float f32x8u __attribute__((vector_size(32), aligned(4)));
  typedef int32_t i32x8 __attribute__((vector_size(32)));
  const i32x8 lane_bit = {1, 2, 4, 8, 16, 32, 64, 128};
  const f32x8 none = f32x8{} - INFINITY;
  f32x8 m8 = none;
  int c = 0;
  if ((v0 & 7) == 0 || !allow)
    for (; c + 8 <= vc; c += 8) {
      f32x8 x = *(const f32x8u*)(z + c);
      if (ts != 1.0f) *(f32x8u*)(z + c) = x = x * ts;
      if (allow) {
        const int v = v0 + c;
        const int32_t bits = (int32_t)((allow[v >> 5] >> (v & 31)) & 0xffu);
        x = ((i32x8{} + bits) & lane_bit) != 0 ? x : none;
      }
      m8 = x > m8 ? x : m8;
    }
  float mx = -INFINITY;
  for (int l = 0; l < 8; ++l) mx = std::max(mx, m8[l]);
  for (; c < vc; ++c) {
    if (ts != 1.0f) z[c] *= ts;
    if (!allow || allowed(v0 + c)) mx = std::max(mx, z[c]);
  }
  if (target >= v0 && target < v0 + vc) st.zt = z[target - v0];
  const bool first = st.mx == -INFINITY;  // nothing allowed seen before: the old sums are 0
  mx = std::max(mx, st.mx);
  if (mx == -INFINITY) {  // nothing allowed yet: the tile contributes nothing
    for (int c = 0; c < vc; ++c) z[c] = 0.0f;
    st.resc = 1.0f;
    return;
  }
  double sum = 0.0, wsum = 0.0;
  for (int c0 = 0; c0 < vc; c0 += 1024) {
    const int c1 = std::min(vc, c0 + 1024);
    float s = 0.0f, ws = 0.0f;
    if (allow) {
      // Tokens outside the allowed set get probability 0.
      for (int c = c0; c < c1; ++c) {
        if (!allowed(v0 + c)) { z[c] = 0.0f; continue; }
        float d = z[c] - mx;
        float e = exp_nonpos(d);
        s += e;
        ws += e * d;
        z[c] = e;
      }
    } else {
      // 8 lanes at a time in vector types (exp_nonpos8): GCC leaves the scalar form unvectorised.
      typedef float f32x8u __attribute__((vector_size(32), aligned(4)));
      f32x8 s8 = {}, ws8 = {};
      int c = c0;
      for (; c + 8 <= c1; c += 8) {
        const f32x8 d = *(const f32x8u*)(z + c) - mx;
        const f32x8 e = exp_nonpos8(d);
        s8 += e;
        ws8 += e * d;
        *(f32x8u*)(z + c) = e;
      }
      for (int l = 0; l < 8; ++l) {
        s += s8[l];
        ws += ws8[l];
      }
      for (; c < c1; ++c) {
        const float d = z[c] - mx;
        const float e = exp_nonpos(d);
        s += e;
        ws += e * d;
        z[c] = e;
      }
    }
    sum += s;
    wsum += ws;
  }
  if (first) {
    st.sum = sum;
    st.wsum = wsum;
    st.resc = 0.0f;
  } else {
    // Σ e (z − mx) relative to the new max: f (Σ e (z − old) + (old − new) Σ e).
    const double f = std::exp((double)st.mx - (double)mx);
    st.wsum = f * (st.wsum + st.sum * ((double)st.mx - (double)mx)) + wsum;
    st.sum = f * st.sum + sum;
    st.resc = (float)f;
  }
  st.mx = mx;
}

}  // namespace

void lm_head_forward(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                     const int32_t* targets, int N, int C, int V, float* scratch, int chunk, const float* inv_temp,
                     const int32_t* mask_idx, const uint32_t* masks) {
  lm_head_forward_tiles(logp, lse, entropy, g, h, W, targets, N, C, V, scratch, chunk, lm_head_tile_cols(V), inv_temp,
                        mask_idx, masks);
}

void lm_head_forward_tiles(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                           const int32_t* targets, int N, int C, int V, float* scratch, int chunk, int cols,
                           const float* inv_temp, const int32_t* mask_idx, const uint32_t* masks) {
  const size_t words = ((size_t)V + 31) / 32;
  std::vector<RowState> st((size_t)std::min(chunk, N));
  for (int n0 = 0; n0 < N; n0 += chunk) {
    const int m = std::min(chunk, N - n0);
    float* gc = g ? g + (size_t)n0 * C : nullptr;
    for (int i = 0; i < m; ++i) st[i] = RowState{0.0, 0.0, -INFINITY, 0.0f, 1.0f};
    for (int v0 = 0; v0 < V; v0 += cols) {
      const int vc = std::min(cols, V - v0);
      const WeightRef Wt = weight_offset(W, (size_t)v0 * C);
      gemm_w(true, m, vc, C, 1.0f, h + (size_t)n0 * C, C, Wt, C, 0.0f, scratch, vc);
#pragma omp parallel for schedule(static)
      for (int i = 0; i < m; ++i) {
        const int n = n0 + i;
        tile_row(st[i], scratch + (size_t)i * vc, v0, vc, targets[n], inv_temp ? inv_temp[n] : 1.0f,
                 mask_idx && mask_idx[n] >= 0 ? masks + (size_t)mask_idx[n] * words : nullptr);
      }
      // g (m, C) = f g + E Wt: the rows rescaled to the new max, then the tile's product (beta = 0 on the first).
      if (gc) {
        if (v0 > 0) {
#pragma omp parallel for schedule(static)
          for (int i = 0; i < m; ++i)
            if (st[i].resc != 1.0f)
              for (int c = 0; c < C; ++c) gc[(size_t)i * C + c] *= st[i].resc;
        }
        gemm_w(false, m, C, vc, 1.0f, scratch, vc, Wt, C, v0 > 0 ? 1.0f : 0.0f, gc, C);
      }
    }
    // P = E / Σ: 1 / Σ goes onto g (C per row) rather than onto every probability.
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; ++i) {
      const int n = n0 + i;
      const double log_sum = std::log(st[i].sum);
      lse[n] = (float)(st[i].mx + log_sum);
      logp[n] = (float)((double)(st[i].zt - st[i].mx) - log_sum);
      if (entropy) entropy[n] = (float)(log_sum - st[i].wsum / st[i].sum);
      if (gc) {
        const float inv_sum = (float)(1.0 / st[i].sum);
        for (int c = 0; c < C; ++c) gc[(size_t)i * C + c] *= inv_sum;
      }
    }
  }
}

void lm_head_backward(float* dh, const float* dlogp, const float* g, WeightRef W, const int32_t* targets, int N,
                      int C, const float* inv_temp) {
  if (W.is_f32()) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float d = inv_temp ? dlogp[n] * inv_temp[n] : dlogp[n];
      const float* wt = W.f32() + (size_t)targets[n] * C;
      const float* gn = g + (size_t)n * C;
      float* o = dh + (size_t)n * C;
      for (int c = 0; c < C; ++c) o[c] = d * (wt[c] - gn[c]);
    }
    return;
  }
  // 16-bit head: the target's row is widened into dh first, then the same arithmetic in place.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float d = inv_temp ? dlogp[n] * inv_temp[n] : dlogp[n];
    const float* gn = g + (size_t)n * C;
    float* o = dh + (size_t)n * C;
    widen(o, W, (size_t)targets[n] * C, (size_t)C);
    for (int c = 0; c < C; ++c) o[c] = d * (o[c] - gn[c]);
  }
}

}  // namespace mcprl
