#pragma once
#include <cstdint>

#include "../core/weight.h"

namespace mcprl {
// out (T, C) = wte[ids[t], :]. ids must already be validated to lie in [0, V).
// wte (V, C) f32 or 16-bit (rows widened).
void embedding_forward(float* out, const int32_t* ids, WeightRef wte, int T, int C);
// No backward: the base embedding is frozen and the token ids are not differentiable, so nothing would
// call one (LoRA never targets the embedding).
}  // namespace mcprl
