// Token embedding lookup on the device (forward only: the embedding is frozen, see ops/embedding.h).
#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

// One block per token row; widening a 16-bit row to f32 is exact, so this matches the CPU op bit for bit.
__global__ void embedding_kernel(float* __restrict__ out, const int32_t* __restrict__ ids, const void* wte,
                                 WDtype t, int C) {
  const int row = blockIdx.x;
  const size_t base = (size_t)ids[row] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[(size_t)row * C + c] = load_w(wte, t, base + c);
}

void embedding_forward(float* out, const int32_t* ids, WeightRef wte, int T, int C) {
  if (T == 0) return;
  embedding_kernel<<<T, 256, 0, stream()>>>(out, ids, wte.data, wte.dtype, C);
  CUDA_LAUNCHED("embedding_forward");
}

}  // namespace cuda
}  // namespace mcprl
