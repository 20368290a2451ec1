// RMSNorm as in HF Llama/Qwen: y = w * x / sqrt(mean(x^2) + eps), computed in f32.
// Backward rule: parameter grads +=, activation grads =.
#include "rmsnorm.h"

#include <cmath>
#include <vector>

namespace mcprl {

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* xn = x + (size_t)n * C;
    float* on = out + (size_t)n * C;
    double ss = 0.0;
    for (int c = 0; c < C; ++c) ss += (double)xn[c] * xn[c];
    float r = 1.0f / std::sqrt((float)(ss / C) + eps);
    rstd[n] = r;
    for (int c = 0; c < C; ++c) on[c] = w[c] * (xn[c] * r);
  }
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int N, int C) {
  // dx_i = r w_i g_i - x_i r^3 / C * sum_j g_j w_j x_j
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* xn = x + (size_t)n * C;
    const float* gn = dout + (size_t)n * C;
    float* dn = dx + (size_t)n * C;
    float r = rstd[n];
    double dot = 0.0;
    for (int c = 0; c < C; ++c) dot += (double)gn[c] * w[c] * xn[c];
    float k = (float)(dot * r * r * r / C);
    for (int c = 0; c < C; ++c) dn[c] = r * w[c] * gn[c] - xn[c] * k;
  }
  if (dw) {
    // Reduce over rows in double; serial over c-blocks keeps it race-free.
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; ++c) {
      double s = 0.0;
      for (int n = 0; n < N; ++n) s += (double)dout[(size_t)n * C + c] * x[(size_t)n * C + c] * rstd[n];
      dw[c] += (float)s;
    }
  }
}

}  // namespace mcprl
