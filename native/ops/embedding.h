#pragma once
#include <cstdint>
namespace mcprl {
// out (T, C) = wte[ids[t], :]. ids must already be validated to lie in [0, V).
void embedding_forward(float* out, const int32_t* ids, const float* wte, int T, int C);
// No backward: the base embedding is frozen and the token ids are not differentiable, so nothing would
// call one (LoRA never targets the embedding).
}  // namespace mcprl
