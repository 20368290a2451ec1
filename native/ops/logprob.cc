// Chunked LM head + log-softmax (Unsloth's trick: never materialise (T, V) logits).
// Backward rule: parameter grads += (none: the head is frozen), activation grads =.
#include "logprob.h"

#include <algorithm>
#include <cmath>

#include "../fastmath.h"
#include "../gemm.h"

namespace mcprl {

void logits_forward(float* z, const float* h, const float* W, int N, int C, int V) {
  gemm(false, true, N, V, C, 1.0f, h, C, W, C, 0.0f, z, V);
}

void logprob_forward(float* logp, float* lse, float* entropy, const float* h, const float* W, const int32_t* targets,
                     int N, int C, int V, float* scratch, int chunk) {
  for (int n0 = 0; n0 < N; n0 += chunk) {
    int m = std::min(chunk, N - n0);
    logits_forward(scratch, h + (size_t)n0 * C, W, m, C, V);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; ++i) {
      const float* z = scratch + (size_t)i * V;
      float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
      for (int v = 0; v < V; ++v) mx = z[v] > mx ? z[v] : mx;
      double sum = 0.0, wsum = 0.0;
      if (entropy) {
#pragma omp simd reduction(+ : sum, wsum)
        for (int v = 0; v < V; ++v) {
          float e = exp_fast(z[v] - mx);
          sum += e;
          wsum += e * (z[v] - mx);
        }
      } else {
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; ++v) sum += exp_fast(z[v] - mx);
      }
      double l = mx + std::log(sum);
      int n = n0 + i;
      lse[n] = (float)l;
      logp[n] = (float)(z[targets[n]] - l);
      // H = -sum p (z - lse) = lse - E_p[z]
      if (entropy) entropy[n] = (float)(std::log(sum) - wsum / sum);
    }
  }
}

void logprob_backward(float* dh, const float* dlogp, const float* dentropy, const float* h, const float* W,
                      const int32_t* targets, const float* lse, const float* entropy, int N, int C, int V,
                      float* scratch, int chunk) {
  for (int n0 = 0; n0 < N; n0 += chunk) {
    int m = std::min(chunk, N - n0);
    logits_forward(scratch, h + (size_t)n0 * C, W, m, C, V);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; ++i) {
      int n = n0 + i;
      float* z = scratch + (size_t)i * V;  // logits -> dz in place
      float g = dlogp[n], L = lse[n];
      float ge = (dentropy && entropy) ? dentropy[n] : 0.0f;
      float H = (dentropy && entropy) ? entropy[n] : 0.0f;
#pragma omp simd
      for (int v = 0; v < V; ++v) {
        float lp = z[v] - L;
        float p = exp_fast(lp);
        z[v] = -g * p - ge * p * (lp + H);
      }
      z[targets[n]] += g;
    }
    gemm(false, false, m, C, V, 1.0f, scratch, V, W, C, 0.0f, dh + (size_t)n0 * C, C);
  }
}

}  // namespace mcprl
