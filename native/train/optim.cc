#include "optim.h"

#include "../backend/backend.h"

#include <algorithm>
#include <cmath>

namespace mcprl {

void adamw_step(float* param, const float* grad, float* m, float* v, size_t n, long step, float lr,
                const AdamWConfig& c) {
  // Scalars in double like torch's Python-side bias corrections, then rounded once to f32.
  const double bc1 = 1.0 - std::pow((double)c.beta1, (double)step);
  const double bc2 = 1.0 - std::pow((double)c.beta2, (double)step);
  const float step_size = (float)(lr / bc1);
  const float bc2_sqrt = (float)std::sqrt(bc2);
  const float decay = (float)(1.0 - (double)lr * c.weight_decay);
#pragma omp parallel for schedule(static)
  for (long i = 0; i < (long)n; ++i) {
    float g = grad[i];
    float p = param[i] * decay;
    float mi = m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    float vi = v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    float denom = std::sqrt(vi) / bc2_sqrt + c.eps;
    param[i] = p - step_size * mi / denom;
  }
}

double grad_norm(const float* grad, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += (double)grad[i] * grad[i];
  return std::sqrt(s);
}

double clip_grad_norm(float* grad, size_t n, double max_norm) {
  double norm = grad_norm(grad, n);
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    float cf = (float)coef;
    for (size_t i = 0; i < n; ++i) grad[i] *= cf;
  }
  return norm;
}

double clip_grad_norm(const Backend& b, float* grad, size_t n, double max_norm) {
  double norm = b.norm(grad, n);
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) b.scale(grad, (float)coef, n);
  return norm;
}

}  // namespace mcprl
