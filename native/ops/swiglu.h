#pragma once
namespace mcprl {
// out (N) = silu(gate) * up, elementwise over N = T * intermediate. Needs gate and up for backward.
void swiglu_forward(float* out, const float* gate, const float* up, long N);
// dgate (N), dup (N) overwritten.
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long N);
}  // namespace mcprl
