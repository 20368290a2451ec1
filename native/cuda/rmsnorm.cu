// RMSNorm on the device (ops/rmsnorm.h): y = w * x * rstd, rstd = 1/sqrt(mean(x^2) + eps), f32 throughout.
// Also per head for Qwen3's q_norm/k_norm (N = T*H rows of C = head_dim).
// Backward rule: parameter grads +=, activation grads =.
#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

// One warp per row: rows are short (head_dim 128) or a few thousand floats (hidden size), and a warp's
// shuffle reduction needs no shared memory or block barrier. 8 rows per block of 256 threads.
constexpr int RN_ROWS = 8;

__global__ void rmsnorm_fwd_kernel(float* __restrict__ out, float* __restrict__ rstd, const float* __restrict__ x,
                                   const float* __restrict__ w, int N, int C, float eps) {
  const int row = blockIdx.x * RN_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* xr = x + (size_t)row * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) ss = fmaf(xr[c], xr[c], ss);
  ss = warp_sum(ss);
  const float r = rsqrtf(ss / (float)C + eps);
  if (lane == 0) rstd[row] = r;
  float* o = out + (size_t)row * C;
  for (int c = lane; c < C; c += 32) o[c] = w[c] * (xr[c] * r);
}

// dx_i = r w_i g_i - x_i r^3 / C * sum_j g_j w_j x_j
__global__ void rmsnorm_bwd_dx_kernel(float* __restrict__ dx, const float* __restrict__ dout,
                                      const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ rstd, int N, int C) {
  const int row = blockIdx.x * RN_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* xr = x + (size_t)row * C;
  const float* gr = dout + (size_t)row * C;
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) dot = fmaf(gr[c] * w[c], xr[c], dot);
  dot = warp_sum(dot);
  const float r = rstd[row];
  const float k = dot * r * r * r / (float)C;
  float* d = dx + (size_t)row * C;
  for (int c = lane; c < C; c += 32) d[c] = r * w[c] * gr[c] - xr[c] * k;
}

// dw (C) += sum_n dout[n] * x[n] * rstd[n]: a column reduction over up to T*H rows. Two deterministic stages
// (no atomics, so the same inputs give the same bits): each block sums a chunk of RN_CHUNK rows for 256 columns
// into part (nchunks, C); the second stage adds the chunks in order.
constexpr int RN_CHUNK = 256;

__global__ void rmsnorm_dw_partial_kernel(float* __restrict__ part, const float* __restrict__ dout,
                                          const float* __restrict__ x, const float* __restrict__ rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, n0 = blockIdx.y * RN_CHUNK;
  if (c >= C) return;
  const int n1 = min(N, n0 + RN_CHUNK);
  float s = 0.0f;
  for (int n = n0; n < n1; ++n) s = fmaf(dout[(size_t)n * C + c] * x[(size_t)n * C + c], rstd[n], s);
  part[(size_t)blockIdx.y * C + c] = s;
}

__global__ void rmsnorm_dw_sum_kernel(float* __restrict__ dw, const float* __restrict__ part, int nchunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int i = 0; i < nchunks; ++i) s += part[(size_t)i * C + c];
  dw[c] += s;
}

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
  if (N == 0) return;
  rmsnorm_fwd_kernel<<<(unsigned)cdiv(N, RN_ROWS), 32 * RN_ROWS, 0, stream()>>>(out, rstd, x, w, N, C, eps);
  CUDA_LAUNCHED("rmsnorm_forward");
}

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int N, int C) {
  if (N == 0) return;
  rmsnorm_bwd_dx_kernel<<<(unsigned)cdiv(N, RN_ROWS), 32 * RN_ROWS, 0, stream()>>>(dx, dout, x, w, rstd, N, C);
  CUDA_LAUNCHED("rmsnorm_backward dx");
  if (!dw) return;
  const int nchunks = (int)cdiv(N, RN_CHUNK);
  auto* part = static_cast<float*>(workspace(WS_RMSNORM_PART, (size_t)nchunks * C * sizeof(float)));
  dim3 grid((unsigned)cdiv(C, 256), (unsigned)nchunks);
  rmsnorm_dw_partial_kernel<<<grid, 256, 0, stream()>>>(part, dout, x, rstd, N, C);
  CUDA_LAUNCHED("rmsnorm_backward dw partial");
  rmsnorm_dw_sum_kernel<<<(unsigned)cdiv(C, 256), 256, 0, stream()>>>(dw, part, nchunks, C);
  CUDA_LAUNCHED("rmsnorm_backward dw sum");
}

}  // namespace cuda
}  // namespace mcprl
