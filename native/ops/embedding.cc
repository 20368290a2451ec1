// Token embedding lookup. Backward rule (all ops): parameter grads +=, activation grads =.
#include "embedding.h"

#include <cstring>

namespace mcprl {

void embedding_forward(float* out, const int32_t* ids, const float* wte, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) std::memcpy(out + (size_t)t * C, wte + (size_t)ids[t] * C, sizeof(float) * C);
}

void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int T, int C) {
  // Serial over t: two tokens may share an id.
  for (int t = 0; t < T; ++t) {
    float* d = dwte + (size_t)ids[t] * C;
    const float* g = dout + (size_t)t * C;
    for (int c = 0; c < C; ++c) d[c] += g[c];
  }
}

}  // namespace mcprl
