// Token embedding lookup (forward only: see embedding.h).
#include "embedding.h"

#include <cstring>

namespace mcprl {

void embedding_forward(float* out, const int32_t* ids, WeightRef wte, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) widen(out + (size_t)t * C, wte, (size_t)ids[t] * C, (size_t)C);
}

}  // namespace mcprl
