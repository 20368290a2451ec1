// Shared pieces of the CUDA backend: error checks, the stream every op runs on, grow-only device
// workspaces, and the 16-bit weight reads that kernels share.
//
// Every pointer an op takes is a DEVICE pointer (same argument order and shapes as native/ops/*.h), except
// small index metadata the host already holds (attention's `segs` / `cu_seqlens`, see attention.cu), which is
// copied to the device per call. Ops are issued in order on one stream and return without synchronising;
// errors of a launch are raised at the launch (cudaGetLastError), errors inside a kernel at the next
// synchronising call.
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "../core/common.h"
#include "../core/weight.h"

#define CUDA_CHECK(call)                                                                        \
  do {                                                                                          \
    cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) FAIL(std::string(#call) + " failed: " + cudaGetErrorString(e_));   \
  } while (0)
// After every kernel launch: a bad configuration (too much shared memory, grid too large) shows here.
#define CUDA_LAUNCHED(name) CUDA_CHECK(cudaGetLastError())

namespace mcprl {
namespace cuda {

// The stream all ops are issued on (the legacy default stream for now: one engine, one stream).
inline cudaStream_t stream() { return 0; }

// Grow-only device scratch buffers, one per slot, kept for the process (so the hot loop never allocates).
// Not thread-safe: the engine issues device work from one thread at a time (EngineState::mu).
enum WorkspaceSlot : int {
  WS_GEMM_A = 0,     // an f32 activation converted to 16-bit for a tensor-core product (gemm_w)
  WS_LMHEAD_Z,       // lm_head: one (rows, vocab chunk) block of logits / probabilities
  WS_LMHEAD_STATE,   // lm_head: per-row running max / sums / target logit / rescale factor
  WS_ATTN_META,      // attention: segment and tile descriptors
  WS_ATTN_DELTA,     // attention backward: rowsum(dout * out) (T, H)
  WS_RMSNORM_PART,   // rmsnorm backward: per-row-chunk partial sums of dw
  WS_COPY_META,      // copy_rows: the copies' descriptors
  WS_NORM,           // norm: the sum of squares brought back to the host
  WS_COUNT
};
void* workspace(WorkspaceSlot slot, size_t bytes);

inline long cdiv(long a, long b) { return (a + b - 1) / b; }
// Blocks of 256 threads for a grid-stride loop over n elements (capped; the loop covers the rest).
inline unsigned grid_stride_blocks(long n) { return (unsigned)std::min<long>(cdiv(n, 256), 65535L * 16); }

// One element of a frozen weight (f32, bf16 or f16 as stored), widened to f32 (exact).
__device__ __forceinline__ float load_w(const void* p, WDtype t, size_t i) {
  if (t == WDtype::F32) return static_cast<const float*>(p)[i];
  const uint16_t u = static_cast<const uint16_t*>(p)[i];
  if (t == WDtype::BF16) return __uint_as_float((uint32_t)u << 16);
  return __half2float(__ushort_as_half(u));
}

// Warp-wide sum / max (all 32 lanes take part and get the result).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum for blockDim.x a multiple of 32, at most 1024; every thread gets the result. `red` is
// 32 floats of shared memory. Fixed order: the same inputs give the same bits.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = lane < nw ? red[lane] : 0.0f;
  return warp_sum(s);
}

}  // namespace cuda
}  // namespace mcprl
