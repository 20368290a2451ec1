// Matrix products of the CUDA backend behind one entry point per operand type (ops.h).
//
// cuBLAS is not on the build machines (only nvcc + cudart), so it is loaded at run time with dlopen: the GPU
// machine has libcublas.so.13 inside PyTorch's pip install (nvidia/cublas/lib), found through
// MCPRL_CUBLAS_DIR, the loader's own search path, or the toolkit's lib64. We declare the few entry points we
// call ourselves (their C ABI is stable; enum values below are those of cublas_api.h / library_types.h).
// Without cuBLAS the tiled kernels below run: WMMA bf16/f16 tensor-core tiles (f32 accumulators) for 16-bit
// operands, plain f32 register tiles for f32. They are the correctness fallback, not the fast path.
//
// Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ, so cuBLAS is called with the operands swapped
// (B first), the same leading dimensions, and (N, M) for the output's shape.
#include <dlfcn.h>
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

// ---------------------------------------------------------------- workspaces (shared by every op)

void* workspace(WorkspaceSlot slot, size_t bytes) {
  struct Buf { void* p = nullptr; size_t n = 0; };
  static Buf bufs[WS_COUNT];
  Buf& b = bufs[slot];
  if (bytes > b.n) {
    // cudaFree waits for work in flight that may still read the old buffer.
    if (b.p) CUDA_CHECK(cudaFree(b.p));
    b.p = nullptr;
    b.n = 0;
    const size_t grow = bytes + bytes / 4;  // some headroom so a slowly growing size does not reallocate each call
    CUDA_CHECK(cudaMalloc(&b.p, grow));
    b.n = grow;
  }
  return b.p;
}

// ---------------------------------------------------------------- cuBLAS through dlopen

namespace {

// cublas_api.h / library_types.h values (stable across CUDA 11-13).
constexpr int CUBLAS_OP_N = 0, CUBLAS_OP_T = 1;
constexpr int CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14;
constexpr int CUBLAS_COMPUTE_32F = 68;  // f32 accumulation; plain f32 inputs stay f32 (no TF32)
constexpr int CUBLAS_GEMM_DEFAULT = -1;

using CreateFn = int (*)(void** handle);
using SetStreamFn = int (*)(void* handle, cudaStream_t s);
using GemmExFn = int (*)(void* handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* A,
                         int Atype, int lda, const void* B, int Btype, int ldb, const void* beta, void* C, int Ctype,
                         int ldc, int computeType, int algo);

struct Cublas {
  bool tried = false;
  void* handle = nullptr;
  GemmExFn gemm_ex = nullptr;
  std::string where = "not loaded yet";
};

Cublas& cublas() {
  static Cublas cb;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (cb.tried) return cb;
  cb.tried = true;
  std::string dirs[4];
  int nd = 0;
  if (const char* d = std::getenv("MCPRL_CUBLAS_DIR")) dirs[nd++] = std::string(d) + "/";
  dirs[nd++] = "";  // the loader's search path (LD_LIBRARY_PATH, ldconfig)
  dirs[nd++] = "/usr/local/cuda/lib64/";
  dirs[nd++] = "/usr/local/cuda/targets/x86_64-linux/lib/";
  std::string tried;
  void* lib = nullptr;
  for (int i = 0; i < nd && !lib; ++i) {
    // cuBLASLt first, global, so libcublas finds it even where its RUNPATH does not point at this folder.
    dlopen((dirs[i] + "libcublasLt.so.13").c_str(), RTLD_NOW | RTLD_GLOBAL);
    const std::string path = dirs[i] + "libcublas.so.13";
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (lib) cb.where = path;
    else tried += (tried.empty() ? "" : ", ") + (dirs[i].empty() ? std::string("the loader's search path") : dirs[i]);
  }
  if (!lib) {
    cb.where = "libcublas.so.13 not found in " + tried + " (set MCPRL_CUBLAS_DIR)";
    return cb;
  }
  auto create = (CreateFn)dlsym(lib, "cublasCreate_v2");
  auto set_stream = (SetStreamFn)dlsym(lib, "cublasSetStream_v2");
  auto gemm_ex = (GemmExFn)dlsym(lib, "cublasGemmEx");
  if (!create || !set_stream || !gemm_ex) {
    cb.where += ": cublasCreate_v2 / cublasSetStream_v2 / cublasGemmEx missing";
    return cb;
  }
  void* h = nullptr;
  int st = create(&h);
  if (st != 0) {
    cb.where += ": cublasCreate failed with status " + std::to_string(st);
    return cb;
  }
  set_stream(h, stream());
  cb.handle = h;
  cb.gemm_ex = gemm_ex;
  return cb;
}

std::atomic<bool> g_force_fallback{[] {
  const char* e = std::getenv("MCPRL_CUDA_GEMM");
  return e != nullptr && std::strcmp(e, "fallback") == 0;
}()};

bool use_cublas() { return !g_force_fallback.load() && cublas().gemm_ex != nullptr; }

void cublas_gemm(int type, bool tA, bool tB, int M, int N, int K, float alpha, const void* A, int lda, const void* B,
                 int ldb, float beta, float* C, int ldc) {
  Cublas& cb = cublas();
  int st = cb.gemm_ex(cb.handle, tB ? CUBLAS_OP_T : CUBLAS_OP_N, tA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                      type, ldb, A, type, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  CHECK(st == 0, "cublasGemmEx failed with status " + std::to_string(st) + " (M=" + std::to_string(M) +
                     " N=" + std::to_string(N) + " K=" + std::to_string(K) + ")");
}

// ---------------------------------------------------------------- fallback kernels

// 16-bit: a 64x64 output tile per block of 4 warps (2x2), each warp 32x32 = 2x2 WMMA 16x16x16 fragments,
// K in steps of 32 through shared memory. Row strides 40 / 72 halves (multiples of 8, as WMMA needs, and
// not multiples of 64 so rows fall on different banks); the f32 staging tile for the epilogue has stride 68.
constexpr int HT_M = 64, HT_N = 64, HT_K = 32, HA_LD = HT_K + 8, HB_LD = HT_N + 8, HC_LD = HT_N + 4;

template <typename T>
__global__ void __launch_bounds__(128) gemm_half_kernel(bool tA, bool tB, int M, int N, int K, float alpha,
                                                       const T* __restrict__ A, int lda, const T* __restrict__ B,
                                                       int ldb, float beta, float* __restrict__ C, int ldc) {
  using namespace nvcuda;
  __shared__ __align__(128) T As[HT_M * HA_LD];
  __shared__ __align__(128) T Bs[HT_K * HB_LD];
  __shared__ __align__(128) float Cs[HT_M * HC_LD];
  const int m0 = blockIdx.y * HT_M, n0 = blockIdx.x * HT_N;
  const int tid = threadIdx.x, warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  const T zero = T(0.0f);
  for (int k0 = 0; k0 < K; k0 += HT_K) {
    // op(A) tile (64 x 32) -> As[i][k]; index order follows the stored layout so reads coalesce.
    for (int idx = tid; idx < HT_M * HT_K; idx += 128) {
      int i, k;
      if (tA) { k = idx / HT_M; i = idx % HT_M; } else { i = idx / HT_K; k = idx % HT_K; }
      const int gi = m0 + i, gk = k0 + k;
      T v = zero;
      if (gi < M && gk < K) v = tA ? A[(size_t)gk * lda + gi] : A[(size_t)gi * lda + gk];
      As[i * HA_LD + k] = v;
    }
    // op(B) tile (32 x 64) -> Bs[k][j]
    for (int idx = tid; idx < HT_K * HT_N; idx += 128) {
      int k, j;
      if (tB) { j = idx / HT_K; k = idx % HT_K; } else { k = idx / HT_N; j = idx % HT_N; }
      const int gk = k0 + k, gj = n0 + j;
      T v = zero;
      if (gk < K && gj < N) v = tB ? B[(size_t)gj * ldb + gk] : B[(size_t)gk * ldb + gj];
      Bs[k * HB_LD + j] = v;
    }
    __syncthreads();
    for (int kk = 0; kk < HT_K; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], As + (wm * 32 + i * 16) * HA_LD + kk, HA_LD);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], Bs + kk * HB_LD + wn * 32 + j * 16, HB_LD);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * HC_LD + wn * 32 + j * 16, acc[i][j], HC_LD,
                              wmma::mem_row_major);
  __syncthreads();
  for (int idx = tid; idx < HT_M * HT_N; idx += 128) {
    const int i = idx / HT_N, j = idx % HT_N, gi = m0 + i, gj = n0 + j;
    if (gi >= M || gj >= N) continue;
    float* c = C + (size_t)gi * ldc + gj;
    const float v = alpha * Cs[i * HC_LD + j];
    *c = beta == 0.0f ? v : v + beta * *c;  // beta 0: C is not read (it may hold garbage, even NaN)
  }
}

// f32: a 64x64 tile per block of 16x16 threads, each thread 4x4 outputs strided by 16 (conflict-free shared
// reads), K in steps of 16. Both tiles are stored k-major so the inner loop reads rows of shared memory.
constexpr int FT = 64, FK = 16, F_LD = FT + 4;

__global__ void __launch_bounds__(256) gemm_f32_kernel(bool tA, bool tB, int M, int N, int K, float alpha,
                                                      const float* __restrict__ A, int lda,
                                                      const float* __restrict__ B, int ldb, float beta,
                                                      float* __restrict__ C, int ldc) {
  __shared__ float As[FK * F_LD];
  __shared__ float Bs[FK * F_LD];
  const int m0 = blockIdx.y * FT, n0 = blockIdx.x * FT;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4, tid = threadIdx.x;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += FK) {
    for (int idx = tid; idx < FT * FK; idx += 256) {
      int i, k;
      if (tA) { k = idx / FT; i = idx % FT; } else { i = idx / FK; k = idx % FK; }
      const int gi = m0 + i, gk = k0 + k;
      As[k * F_LD + i] = (gi < M && gk < K) ? (tA ? A[(size_t)gk * lda + gi] : A[(size_t)gi * lda + gk]) : 0.0f;
      int j;
      if (tB) { j = idx / FK; k = idx % FK; } else { k = idx / FT; j = idx % FT; }
      const int gj = n0 + j;
      const int gk2 = k0 + k;
      Bs[k * F_LD + j] = (gk2 < K && gj < N) ? (tB ? B[(size_t)gj * ldb + gk2] : B[(size_t)gk2 * ldb + gj]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < FK; ++k) {
      float a[4], b[4];
      for (int r = 0; r < 4; ++r) a[r] = As[k * F_LD + ty + 16 * r];
      for (int c = 0; c < 4; ++c) b[c] = Bs[k * F_LD + tx + 16 * c];
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
    }
    __syncthreads();
  }
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      const int gi = m0 + ty + 16 * r, gj = n0 + tx + 16 * c;
      if (gi >= M || gj >= N) continue;
      float* p = C + (size_t)gi * ldc + gj;
      const float v = alpha * acc[r][c];
      *p = beta == 0.0f ? v : v + beta * *p;
    }
}

template <typename T>
__global__ void to_half_kernel(T* __restrict__ dst, const float* __restrict__ src, int rows, int cols, int lds) {
  const size_t n = (size_t)rows * cols;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / cols, c = i % cols;
    dst[i] = T(src[r * lds + c]);  // round to nearest even (the __nv_bfloat16 / __half float constructors)
  }
}

template <typename T>
void to_half_2d(T* dst, const float* src, int rows, int cols, int lds) {
  const size_t n = (size_t)rows * cols;
  if (n == 0) return;
  const int blocks = (int)std::min<size_t>((n + 255) / 256, 65535u * 8);
  to_half_kernel<T><<<blocks, 256, 0, stream()>>>(dst, src, rows, cols, lds);
  CUDA_LAUNCHED("to_half");
}

void check_dims(int M, int N, int K) { CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative dimension"); }

}  // namespace

bool gemm_have_cublas() { return cublas().gemm_ex != nullptr; }
const char* gemm_cublas_path() { return cublas().where.c_str(); }
void gemm_force_fallback(bool on) { g_force_fallback.store(on); }

void to_half(uint16_t* dst, const float* src, size_t n, WDtype t) {
  CHECK(t == WDtype::BF16 || t == WDtype::F16, "to_half: type must be bf16 or f16");
  CHECK(n <= (size_t)INT32_MAX, "to_half: too many elements for one call");
  if (t == WDtype::BF16) to_half_2d(reinterpret_cast<__nv_bfloat16*>(dst), src, 1, (int)n, (int)n);
  else to_half_2d(reinterpret_cast<__half*>(dst), src, 1, (int)n, (int)n);
}

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (use_cublas()) return cublas_gemm(CUDA_R_32F, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  dim3 grid((unsigned)cdiv(N, FT), (unsigned)cdiv(M, FT));
  gemm_f32_kernel<<<grid, 256, 0, stream()>>>(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  CUDA_LAUNCHED("gemm_f32");
}

void gemm_half(WDtype t, bool transA, bool transB, int M, int N, int K, float alpha, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  CHECK(t == WDtype::BF16 || t == WDtype::F16, "gemm_half: type must be bf16 or f16");
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (use_cublas())
    return cublas_gemm(t == WDtype::BF16 ? CUDA_R_16BF : CUDA_R_16F, transA, transB, M, N, K, alpha, A, lda, B, ldb,
                       beta, C, ldc);
  dim3 grid((unsigned)cdiv(N, HT_N), (unsigned)cdiv(M, HT_M));
  if (t == WDtype::BF16)
    gemm_half_kernel<__nv_bfloat16><<<grid, 128, 0, stream()>>>(
        transA, transB, M, N, K, alpha, reinterpret_cast<const __nv_bfloat16*>(A), lda,
        reinterpret_cast<const __nv_bfloat16*>(B), ldb, beta, C, ldc);
  else
    gemm_half_kernel<__half><<<grid, 128, 0, stream()>>>(transA, transB, M, N, K, alpha,
                                                         reinterpret_cast<const __half*>(A), lda,
                                                         reinterpret_cast<const __half*>(B), ldb, beta, C, ldc);
  CUDA_LAUNCHED("gemm_half");
}

void gemm_w(bool transW, int M, int N, int K, float alpha, const float* A, int lda, WeightRef W, int ldw, float beta,
            float* C, int ldc) {
  if (W.is_f32()) return gemm(false, transW, M, N, K, alpha, A, lda, W.f32(), ldw, beta, C, ldc);
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  // A (M, K) rounded to W's 16-bit type, packed (M, K): the tensor cores take both operands in one type.
  auto* Ah = static_cast<uint16_t*>(workspace(WS_GEMM_A, (size_t)M * K * sizeof(uint16_t)));
  if (W.dtype == WDtype::BF16) to_half_2d(reinterpret_cast<__nv_bfloat16*>(Ah), A, M, K, lda);
  else to_half_2d(reinterpret_cast<__half*>(Ah), A, M, K, lda);
  gemm_half(W.dtype, false, transW, M, N, K, alpha, Ah, K, W.u16(), ldw, beta, C, ldc);
}

}  // namespace cuda
}  // namespace mcprl
