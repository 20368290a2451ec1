#pragma once
#include "../core/weight.h"

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

// The LoRA products above, written once over any row-major gemm with native/kernels/gemm.h's signature: the CPU ops
// pass the CPU gemm, the CUDA backend (native/cuda/linear.cu) its device gemm.
template <typename Gemm>
void lora_forward_with(Gemm gemm, float* y, float* xa, const float* x, const LoraView& l, int N, int in, int out) {
  gemm(false, true, N, l.r, in, 1.0f, x, in, l.A, in, 0.0f, xa, l.r);
  gemm(false, true, N, out, l.r, l.scale, xa, l.r, l.B, l.r, 1.0f, y, out);
}

template <typename Gemm>
void lora_backward_with(Gemm gemm, float* dx, float* dA, float* dB, float* dh, const float* dy, const float* x,
                        const float* xa, const LoraView& l, int N, int in, int out) {
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
