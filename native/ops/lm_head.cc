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

void lm_head_forward(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                     const int32_t* targets, int N, int C, int V, float* scratch, int chunk, const float* inv_temp,
                     const int32_t* mask_idx, const uint32_t* masks) {
  const size_t words = ((size_t)V + 31) / 32;
  std::vector<float> inv_sum((size_t)std::min(chunk, N));
  for (int n0 = 0; n0 < N; n0 += chunk) {
    const int m = std::min(chunk, N - n0);
    logits_forward(scratch, h + (size_t)n0 * C, W, m, C, V);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; ++i) {
      float* z = scratch + (size_t)i * V;  // logits, then exp(z - max) in place
      const int n = n0 + i;
      const uint32_t* allow = mask_idx && mask_idx[n] >= 0 ? masks + (size_t)mask_idx[n] * words : nullptr;
      auto allowed = [allow](int v) { return (bool)((allow[v >> 5] >> (v & 31)) & 1u); };
      // Passes over the row's V logits are what this op adds to its two GEMMs, so the temperature rides on the
      // max pass, and 1 / Σ goes onto g (C per row, after the second product) instead of onto P.
      float mx = -INFINITY;
      const float ts = inv_temp ? inv_temp[n] : 1.0f;
      if (ts != 1.0f) {
#pragma omp simd reduction(max : mx)
        for (int v = 0; v < V; ++v) {
          z[v] *= ts;
          mx = std::max(mx, allow && !allowed(v) ? -INFINITY : z[v]);
        }
      } else if (allow) {
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
          // 8 lanes at a time in vector types (exp_nonpos8): GCC leaves the scalar form unvectorised.
          typedef float f32x8u __attribute__((vector_size(32), aligned(4)));
          f32x8 s8 = {}, ws8 = {};
          int v = v0;
          for (; v + 8 <= v1; v += 8) {
            const f32x8 d = *(const f32x8u*)(z + v) - mx;
            const f32x8 e = exp_nonpos8(d);
            s8 += e;
            ws8 += e * d;
            *(f32x8u*)(z + v) = e;
          }
          for (int l = 0; l < 8; ++l) {
            s += s8[l];
            ws += ws8[l];
          }
          for (; v < v1; ++v) {
            const float d = z[v] - mx;
            const float e = exp_nonpos(d);
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
      inv_sum[i] = (float)(1.0 / sum);
    }
    // g (m, C) = P (m, V) W (V, C), with P = E / Σ: the product of the unnormalised E, each row then scaled.
    if (g) {
      float* gc = g + (size_t)n0 * C;
      gemm_w(false, m, C, V, 1.0f, scratch, V, W, C, 0.0f, gc, C);
#pragma omp parallel for schedule(static)
      for (int i = 0; i < m; ++i)
        for (int c = 0; c < C; ++c) gc[(size_t)i * C + c] *= inv_sum[i];
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
