// AdamW on device buffers (train/optim.h): torch.optim.AdamW semantics on one flat f32 parameter buffer.
// The bias-correction scalars are computed on the host in double and rounded once to f32, as the CPU step does,
// so both run the same f32 arithmetic per element (up to fused multiply-adds).
#include <algorithm>
#include <cmath>

#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

__global__ void adamw_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, size_t n, float step_size, float bc2_sqrt, float decay,
                             float beta1, float beta2, float eps) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float g = grad[i];
    const float p = param[i] * decay;
    const float mi = m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    param[i] = p - step_size * mi / denom;
  }
}

void adamw_step(float* param, const float* grad, float* m, float* v, size_t n, long step, float lr,
                const AdamWConfig& c) {
  if (n == 0) return;
  const double bc1 = 1.0 - std::pow((double)c.beta1, (double)step);
  const double bc2 = 1.0 - std::pow((double)c.beta2, (double)step);
  const float step_size = (float)(lr / bc1);
  const float bc2_sqrt = (float)std::sqrt(bc2);
  const float decay = (float)(1.0 - (double)lr * c.weight_decay);
  const unsigned blocks = (unsigned)std::min<size_t>((n + 255) / 256, 65535u * 16);
  adamw_kernel<<<blocks, 256, 0, stream()>>>(param, grad, m, v, n, step_size, bc2_sqrt, decay, c.beta1, c.beta2,
                                             c.eps);
  CUDA_LAUNCHED("adamw_step");
}

// Sum of squares in double: one block of 1024 threads, each a strided partial sum, then a tree in shared memory,
// so the order is fixed (the same bits every run, not the CPU's sequential order).
__global__ void sumsq_kernel(const float* __restrict__ x, size_t n, double* __restrict__ out) {
  __shared__ double part[1024];
  double s = 0.0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i] * (double)x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = part[0];
}

double norm(const float* x, size_t n) {
  if (n == 0) return 0.0;
  auto* d = static_cast<double*>(workspace(WS_NORM, sizeof(double)));
  sumsq_kernel<<<1, 1024, 0, stream()>>>(x, n, d);
  CUDA_LAUNCHED("norm");
  double s = 0.0;
  CUDA_CHECK(cudaMemcpy(&s, d, sizeof s, cudaMemcpyDeviceToHost));
  return std::sqrt(s);
}

__global__ void scale_kernel(float* __restrict__ x, float s, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] *= s;
}

void scale(float* x, float s, size_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_stride_blocks((long)n), 256, 0, stream()>>>(x, s, n);
  CUDA_LAUNCHED("scale");
}

}  // namespace cuda
}  // namespace mcprl
