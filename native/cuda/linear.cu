// Linear projection + LoRA on the device (ops/linear.h): y = x W^T + b + s (x A^T) B^T.
// The base product goes through gemm_w (bf16 weights on the tensor cores, f32 accumulation); the LoRA
// products are f32 x f32 (the adapter, its gradients and optimiser state are f32), like the CPU op.
// Backward rule: parameter grads += (only LoRA A and B have them), activation grads = (lora_backward's dx: +=).
#include <algorithm>

#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

__global__ void bias_fill_kernel(float* __restrict__ y, const float* __restrict__ b, int N, int out) {
  const long total = (long)N * out;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x)
    y[i] = b[i % out];
}

void linear_forward(float* y, const float* x, WeightRef W, const float* b, int N, int in, int out) {
  if (b && N > 0) {
    const long total = (long)N * out;
    bias_fill_kernel<<<(unsigned)std::min<long>(cdiv(total, 256), 65535L * 16), 256, 0, stream()>>>(y, b, N, out);
    CUDA_LAUNCHED("linear bias");
  }
  gemm_w(true, N, out, in, 1.0f, x, in, W, in, b ? 1.0f : 0.0f, y, out);
}

void linear_backward(float* dx, const float* dy, WeightRef W, int N, int in, int out) {
  gemm_w(false, N, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
}

void lora_forward(float* y, float* xa, const float* x, const LoraView& l, int N, int in, int out) {
  lora_forward_with(cuda::gemm, y, xa, x, l, N, in, out);
}

void lora_backward(float* dx, float* dA, float* dB, float* dh, const float* dy, const float* x, const float* xa,
                   const LoraView& l, int N, int in, int out) {
  lora_backward_with(cuda::gemm, dx, dA, dB, dh, dy, x, xa, l, N, in, out);
}

}  // namespace cuda
}  // namespace mcprl
