#pragma once
#include <cstdint>
namespace mcprl {
// out (T, C) = wte[ids[t], :]. ids must already be validated to lie in [0, V).
void embedding_forward(float* out, const int32_t* ids, const float* wte, int T, int C);
// dwte (V, C) += dout rows scattered by ids. The base embedding is frozen, so the model never calls
// this; it exists for completeness and for the gradient check.
void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int T, int C);
}  // namespace mcprl
