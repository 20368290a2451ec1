// The LM head + log-softmax (see lm_head.h).
#include "lm_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../fastmath.h"
#include "../gemm.h"

namespace mcprl {

void logits_forward(float* z, const float* h, WeightRef W, int N, int C, int V) {
  gemm_w(true, N, V, C, 1.0f, h, C, W, C, 0.0f, z, V);
}

void lm_head_forward(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                     const int32_t* targets, int N, int C, int V, float* scratch, int chunk, const float* inv_temp,
                     const int32_t* mask_idx, const uint32_t* masks) {
  const size_t words = ((size_t)V + 31) / 32;
  for (int n0 = 0; n0 < N; n0 += chunk) {
    const int m = std::min(chunk, N - n0);
    logits_forward(scratch, h + (size_t)n0 * C, W, m, C, V);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; ++i) {
      float* z = scratch + (size_t)i * V;  // logits, then probabilities in place
      const int n = n0 + i;
      const uint32_t* allow = mask_idx && mask_idx[n] >= 0 ? masks + (size_t)mask_idx[n] * words : nullptr;
      auto allowed = [allow](int v) { return (bool)((allow[v >> 5] >> (v & 31)) & 1u); };
      if (inv_temp && inv_temp[n] != 1.0f) {
        const float s = inv_temp[n];
#pragma omp simd
        for (int v = 0; v < V; ++v) z[v] *= s;
      }
      float mx = -INFINITY;
      if (allow) {
        for (int v = 0; v < V; ++v)
          if (allowed(v)) mx = std::max(mx, z[v]);
      } else {
#pragma omp simd reduction(max : mx)
        for (int v = 0; v < V; ++v) mx = std::max(mx, z[v]);
      }
      const float zt = z[targets[n]];
      // Blocked partial sums: float within a block of 1024, double across blocks (V ~ 150k terms).
      double sum = 0.0, wsum = 0.0;
      for (int v0 = 0; v0 < V; v0 += 1024) {
        const int v1 = std::min(V, v0 + 1024);
        float s = 0.0f, ws = 0.0f;
        if (allow) {
          // Tokens outside the allowed set get probability 0.
          for (int v = v0; v < v1; ++v) {
            if (!allowed(v)) { z[v] = 0.0f; continue; }
            float d = z[v] - mx;
            float e = exp_nonpos(d);
            s += e;
            ws += e * d;
            z[v] = e;
          }
        } else {
#pragma omp simd reduction(+ : s, ws)
          for (int v = v0; v < v1; ++v) {
            float d = z[v] - mx;
            float e = exp_nonpos(d);
            s += e;
            ws += e * d;
            z[v] = e;
          }
        }
        sum += s;
        wsum += ws;
      }
      const double log_sum = std::log(sum);
      lse[n] = (float)(mx + log_sum);
      logp[n] = (float)((double)(zt - mx) - log_sum);
      if (entropy) entropy[n] = (float)(log_sum - wsum / sum);
      if (g) {
        const float inv = (float)(1.0 / sum);
#pragma omp simd
        for (int v = 0; v < V; ++v) z[v] *= inv;
      }
    }
    // g (m, C) = P (m, V) W (V, C)
    if (g) gemm_w(false, m, C, V, 1.0f, scratch, V, W, C, 0.0f, g + (size_t)n0 * C, C);
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
