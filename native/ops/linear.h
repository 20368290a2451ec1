#pragma once
#include "../weight.h"

namespace mcprl {
// A LoRA pair for one projection: A (r, in), B (out, r), applied as scale * (x A^T) B^T.
struct LoraView {
  const float* A = nullptr;  // (r, in)
  const float* B = nullptr;  // (out, r)
  int r = 0;
  float scale = 0.0f;
};

// Frozen base projection: y (N, out) = x (N, in) W^T + b. W (out, in) as stored by HF, f32 or 16-bit (widened in
// the product, gemm_w); b (out) or null.
void linear_forward(float* y, const float* x, WeightRef W, const float* b, int N, int in, int out);
// dx (N, in) = dy W (activation grad, overwritten). W and b are frozen: no weight gradient.
void linear_backward(float* dx, const float* dy, WeightRef W, int N, int in, int out);

// LoRA term added onto y: xa (N, r) = x A^T (saved for backward); y (N, out) += scale * xa B^T.
void lora_forward(float* y, float* xa, const float* x, const LoraView& l, int N, int in, int out);
// dA (r, in) += scale * (dy B)^T x;  dB (out, r) += scale * dy^T xa;  dx (N, in) += scale * (dy B) A.
// dx is ACCUMULATED here because the base linear_backward already wrote dx = dy W; dh (N, r) is scratch.
// dA/dB may be null (adapter used frozen, e.g. for the KL reference).
void lora_backward(float* dx, float* dA, float* dB, float* dh, const float* dy, const float* x, const float* xa,
                   const LoraView& l, int N, int in, int out);
}  // namespace mcprl
