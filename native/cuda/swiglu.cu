// SwiGLU activation on the device (ops/swiglu.h): out = silu(gate) * up, elementwise, f32.
// Backward rule: activation grads =.

#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

__global__ void swiglu_fwd_kernel(float* __restrict__ out, const float* __restrict__ gate,
                                  const float* __restrict__ up, long N) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void swiglu_bwd_kernel(float* __restrict__ dgate, float* __restrict__ dup, const float* __restrict__ dout,
                                  const float* __restrict__ gate, const float* __restrict__ up, long N) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < N; i += (long)gridDim.x * blockDim.x) {
    const float g = gate[i], s = 1.0f / (1.0f + expf(-g));
    dup[i] = dout[i] * g * s;
    dgate[i] = dout[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, long N) {
  if (N == 0) return;
  swiglu_fwd_kernel<<<grid_stride_blocks(N), 256, 0, stream()>>>(out, gate, up, N);
  CUDA_LAUNCHED("swiglu_forward");
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long N) {
  if (N == 0) return;
  swiglu_bwd_kernel<<<grid_stride_blocks(N), 256, 0, stream()>>>(dgate, dup, dout, gate, up, N);
  CUDA_LAUNCHED("swiglu_backward");
}

}  // namespace cuda
}  // namespace mcprl
