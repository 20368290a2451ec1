// Linear projection with optional bias and LoRA: y = x W^T + b + s (x A^T) B^T.
// Backward rule: parameter grads += (only LoRA A and B have them), activation grads =.
#include "linear.h"

#include <cstddef>

#include "../gemm.h"

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
  gemm(false, true, N, l.r, in, 1.0f, x, in, l.A, in, 0.0f, xa, l.r);
  gemm(false, true, N, out, l.r, l.scale, xa, l.r, l.B, l.r, 1.0f, y, out);
}

void lora_backward(float* dx, float* dA, float* dB, float* dh, const float* dy, const float* x, const float* xa,
                   const LoraView& l, int N, int in, int out) {
  // dh (N, r) = scale * dy B
  gemm(false, false, N, l.r, out, l.scale, dy, out, l.B, l.r, 0.0f, dh, l.r);
  // dB (out, r) += scale * dy^T xa
  if (dB) gemm(true, false, out, l.r, N, l.scale, dy, out, xa, l.r, 1.0f, dB, l.r);
  // dA (r, in) += dh^T x
  if (dA) gemm(true, false, l.r, in, N, 1.0f, dh, l.r, x, in, 1.0f, dA, in);
  // dx (N, in) += dh A
  if (dx) gemm(false, false, N, in, l.r, 1.0f, dh, l.r, l.A, in, 1.0f, dx, in);
}

}  // namespace mcprl
