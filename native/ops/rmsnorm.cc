// RMSNorm as in HF Llama/Qwen: y = w * x / sqrt(mean(x^2) + eps), computed in f32.
// Backward rule: parameter grads +=, activation grads =.
//
// A row's sums (Σ x², and Σ g w x in backward) run in double precision in 8 lanes (element c in lane c mod 8), then
// the lanes add in one fixed tree: the result depends on the row alone, not on the thread count or on which other
// rows share the call. dw sums over rows, for 8 columns at a time, in row order.
#include "rmsnorm.h"

#include <cmath>
#include <cstring>

namespace mcprl {

namespace {

typedef float f8 __attribute__((vector_size(32)));
typedef float f8u __attribute__((vector_size(32), aligned(4)));
typedef double d8 __attribute__((vector_size(64)));

// 8 floats from p (n of them when n < 8, the rest 0), widened to double.
inline d8 load8(const float* p, int n) {
  f8 v = {};
  if (n >= 8) v = *(const f8u*)p;
  else std::memcpy(&v, p, sizeof(float) * n);
  return __builtin_convertvector(v, d8);
}

inline double tree_sum(d8 a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

// Σ_c a[c] b[c] (c[c] when c is not null) in double, 8 lanes, then tree_sum.
inline double lane_dot(const float* a, const float* b, const float* c, int C) {
  d8 acc = {};
  for (int c0 = 0; c0 < C; c0 += 8) {
    const int n = C - c0;
    d8 t = load8(a + c0, n) * load8(b + c0, n);
    if (c) t *= load8(c + c0, n);
    acc += t;
  }
  return tree_sum(acc);
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* xn = x + (size_t)n * C;
    float* on = out + (size_t)n * C;
    const double ss = lane_dot(xn, xn, nullptr, C);
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
    const double dot = lane_dot(gn, w, xn, C);
    float k = (float)(dot * r * r * r / C);
    for (int c = 0; c < C; ++c) dn[c] = r * w[c] * gn[c] - xn[c] * k;
  }
  if (dw) {
    // dw_c += Σ_n g_nc x_nc r_n in double, rows in order; 8 columns per work item (race-free, one writer each).
    const int blocks = (C + 7) / 8;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; ++b) {
      const int c0 = b * 8, m = C - c0;
      d8 s = {};
      for (int n = 0; n < N; ++n)
        s += load8(dout + (size_t)n * C + c0, m) * load8(x + (size_t)n * C + c0, m) * (double)rstd[n];
      for (int j = 0; j < 8 && j < m; ++j) dw[c0 + j] += (float)s[j];
    }
  }
}

}  // namespace mcprl
