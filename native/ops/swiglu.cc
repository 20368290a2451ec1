// SwiGLU MLP activation. Backward rule: parameter grads +=, activation grads =.
#include "swiglu.h"

#include <cmath>

namespace mcprl {

void swiglu_forward(float* out, const float* gate, const float* up, long N) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < N; ++i) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long N) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < N; ++i) {
    float g = gate[i];
    float s = 1.0f / (1.0f + std::exp(-g));
    float silu = g * s;
    dup[i] = dout[i] * silu;
    dgate[i] = dout[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
  }
}

}  // namespace mcprl
