// The CUDA backend's memory (native/backend/backend.h): device allocations, copies within the device and across to the
// host, and the small data-movement ops the model needs between the ops proper (residual adds, the loss rows'
// gather and scatter). Everything is issued on stream() in order; copies to the host wait for the work issued
// before them.
#include <atomic>

#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

static std::atomic<size_t> g_bytes{0}, g_peak{0};

static void* dev_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess)
    FAIL("CUDA out of memory allocating " + std::to_string(bytes) + " bytes (" + cudaGetErrorString(e) + ")");
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream()));
  const size_t now = g_bytes += bytes;
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

// cudaFree waits for the work in flight that may still use the buffer.
static void dev_release(void* p, size_t bytes) {
  cudaFree(p);  // never throws: release runs in destructors
  g_bytes -= bytes;
}

const Allocator& device_allocator() {
  static const Allocator a = {dev_alloc, dev_release};
  return a;
}

size_t memory_bytes() { return g_bytes.load(); }
size_t memory_peak_bytes() { return g_peak.load(); }
void memory_reset_peak() { g_peak.store(g_bytes.load()); }

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
}
// From pageable host memory: the call returns once the source has been read, so the caller may reuse it.
void upload(void* dst, const void* host, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
}
void download(void* host, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
}
// One block per copy.
__global__ void copy_rows_kernel(const RowCopy* __restrict__ c) {
  const RowCopy r = c[blockIdx.x];
  for (size_t i = threadIdx.x; i < r.count; i += blockDim.x) r.dst[i] = r.src[i];
}

void copy_rows(const RowCopy* copies, int n) {
  if (n == 0) return;
  auto* meta = static_cast<RowCopy*>(workspace(WS_COPY_META, sizeof(RowCopy) * n));
  CUDA_CHECK(cudaMemcpyAsync(meta, copies, sizeof(RowCopy) * n, cudaMemcpyHostToDevice, stream()));
  copy_rows_kernel<<<n, 256, 0, stream()>>>(meta);
  CUDA_LAUNCHED("copy_rows");
}

void zero(void* p, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream()));
}

__global__ void add_kernel(float* y, const float* a, const float* b, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) y[i] = a[i] + b[i];
}

void add(float* y, const float* a, const float* b, long n) {
  if (n == 0) return;
  add_kernel<<<grid_stride_blocks(n), 256, 0, stream()>>>(y, a, b, n);
  CUDA_LAUNCHED("add");
}

// One block per row j: dst row j = src row rows[j] (gather), or dst row rows[j] += src row j (scatter).
__global__ void gather_rows_kernel(float* dst, const float* src, const int32_t* rows, int C) {
  const int j = blockIdx.x;
  const float* s = src + (size_t)rows[j] * C;
  float* d = dst + (size_t)j * C;
  for (int k = threadIdx.x; k < C; k += blockDim.x) d[k] = s[k];
}

__global__ void scatter_add_rows_kernel(float* dst, const float* src, const int32_t* rows, int C) {
  const int j = blockIdx.x;
  float* d = dst + (size_t)rows[j] * C;
  const float* s = src + (size_t)j * C;
  for (int k = threadIdx.x; k < C; k += blockDim.x) d[k] += s[k];
}

void gather_rows(float* dst, const float* src, const int32_t* rows, int M, int C) {
  if (M == 0) return;
  gather_rows_kernel<<<M, 256, 0, stream()>>>(dst, src, rows, C);
  CUDA_LAUNCHED("gather_rows");
}

void scatter_add_rows(float* dst, const float* src, const int32_t* rows, int M, int C) {
  if (M == 0) return;
  scatter_add_rows_kernel<<<M, 256, 0, stream()>>>(dst, src, rows, C);
  CUDA_LAUNCHED("scatter_add_rows");
}

}  // namespace cuda
}  // namespace mcprl
