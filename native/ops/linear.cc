// Linear projection with optional bias and LoRA: y = x W^T + b + s (x A^T) B^T.
// Backward rule: parameter grads += (only LoRA A and B have them), activation grads =.
#include "linear.h"

#include <cstddef>

#include "../kernels/gemm.h"

namespace mcprl {

void linear_forward(float* y, const float* x, WeightRef W, const float* b, int N, int in, int out) {
  if (b) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < out; ++o) y[(size_t)n * out + o] = b[o];
  }
  gemm_w(true, N, out, in, 1.0f, x, in, W, in, b ? 1.0f : 0.0f, y, out);
}

void linear_backward(float* dx, const float* dy, WeightRef W, int N, int in, int out) {
  gemm_w(false, N, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
}

void lora_forward(float* y, float* xa, const float* x, const LoraView& l, int N, int in, int out) {
  lora_forward_with(gemm, y, xa, x, l, N, in, out);
}

void lora_backward(float* dx, float* dA, float* dB, float* dh, const float* dy, const float* x, const float* xa,
                   const LoraView& l, int N, int in, int out) {
  lora_backward_with(gemm, dx, dA, dB, dh, dy, x, xa, l, N, in, out);
}

}  // namespace mcprl
