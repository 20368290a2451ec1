#pragma once
namespace mcprl {
// out (N, C) = x * rstd * w, rstd (N) = 1/sqrt(mean(x^2) + eps); rstd is saved for backward.
// Also used per head for Qwen3's q_norm/k_norm with N = T*H rows of C = head_dim.
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps);
// dx (N, C) = (activation grad, overwritten); dw (C) += (may be null: frozen weight).
// Needs x and rstd from forward.
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int N, int C);
}  // namespace mcprl
