// Portable GEMM after the BLIS/GotoBLAS scheme: pack a KC-deep slice of op(A) into MR-row panels and of
// op(B) into NR-column panels, then a 6x16 register-tile microkernel written with GCC vector extensions
// (compiles to AVX2+FMA under -march=x86-64-v3, to plain SIMD or scalar code elsewhere).
#include "gemm.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../core/common.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef MCPRL_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace mcprl {

static std::atomic<bool> g_portable{[] {
  const char* e = std::getenv("MCPRL_PORTABLE_GEMM");
  return e != nullptr && e[0] == '1';
}()};
static std::atomic<int> g_threads{0};
static thread_local bool t_rowwise = false;
static thread_local bool t_blocked = false;

void gemm_set_rowwise(bool on) { t_rowwise = on; }
bool gemm_rowwise() { return t_rowwise; }
void gemm_set_blocked(bool on) { t_blocked = on; }
bool gemm_blocked() { return t_blocked; }

// The direct dot-product path of x W^T (see kGemmSmallRows, row-wise and blocked mode in gemm.h).
static bool dot_path(bool transA, bool transB, int M) {
  return !t_blocked && (M <= kGemmSmallRows || t_rowwise) && transB && !transA;
}

bool gemm_have_blas() {
#ifdef MCPRL_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}
bool gemm_portable_forced() { return g_portable.load(); }
void gemm_set_portable(bool on) { g_portable.store(on); }

#ifdef MCPRL_HAVE_OPENBLAS
// OpenBLAS and fork(). OpenBLAS (pthreads build) registers blas_thread_shutdown_ as a pthread_atfork prepare handler:
// in the forking thread it stores "exit" (-1) in every pool thread's queue slot, wakes them and joins them, and the
// next OpenBLAS call re-creates the pool. Nothing stops it while another thread has an sgemm in flight, which is what
// happens when the engine runs on a worker thread while the JavaScript thread spawns a process (an MCP server,
// --isolate's per-rollout servers): a pool thread that takes the -1 in place of its part of the job exits, and the
// sgemm's caller spins forever waiting for that part (seen with gdb: the engine's thread in exec_blas_async_wait,
// the forks going on); a pool thread already working stores "idle" (0) over the -1 when it is done, and the join
// waits forever. scripts/stress-blas-fork.ts hangs 8 trials in 8 so. Setting the thread count once and keeping it
// does not help (every fork tears the pool down and the next call builds it again, and the race needs no resize),
// nor does spawning from one particular thread (any BLAS call on any other thread races with the fork). What is
// safe: no OpenBLAS call is in flight while a fork's prepare handlers run. So every OpenBLAS call holds g_blas_fork
// shared, and a prepare handler of ours takes it exclusively: a fork waits for the products in flight and none starts
// until the fork is done. pthread_atfork runs prepare handlers in reverse order of registration; ours is registered
// when the addon loads, after OpenBLAS's (registered by its constructor, which runs first because the addon links
// against it), so it runs before OpenBLAS's shutdown. Node offers no hook around child_process.spawn; this one
// covers every fork in the process, from any thread. The lock prefers writers so that back-to-back products cannot
// starve a fork; nothing takes it twice on one thread.
namespace {
pthread_rwlock_t g_blas_fork;
std::atomic<long> g_blas_calls{0}, g_forks{0};

void blas_lock_init() {
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&g_blas_fork, &a);
  pthread_rwlockattr_destroy(&a);
}

struct BlasForkGuard {
  BlasForkGuard() {
    blas_lock_init();
    pthread_atfork([] { pthread_rwlock_wrlock(&g_blas_fork); },
                   [] {
                     g_forks.fetch_add(1);
                     pthread_rwlock_unlock(&g_blas_fork);
                   },
                   // The child has one thread, the one that forked: nobody else can hold the lock, and glibc's
                   // unlock would look for the writer by the parent's thread id, so it starts afresh instead.
                   [] { blas_lock_init(); });
  }
} g_blas_fork_guard;

// Holds g_blas_fork for one OpenBLAS call: shared for a product, exclusive for a change of the pool.
struct BlasCall {
  explicit BlasCall(bool exclusive) {
    if (exclusive) pthread_rwlock_wrlock(&g_blas_fork);
    else pthread_rwlock_rdlock(&g_blas_fork);
  }
  ~BlasCall() { pthread_rwlock_unlock(&g_blas_fork); }
  BlasCall(const BlasCall&) = delete;
  BlasCall& operator=(const BlasCall&) = delete;
};
}  // namespace
#endif

BlasForkStats blas_fork_stats() {
#ifdef MCPRL_HAVE_OPENBLAS
  return {g_blas_calls.load(), g_forks.load()};
#else
  return {0, 0};
#endif
}

void set_threads(int n) {
  if (n <= 0) {
#ifdef _OPENMP
    n = omp_get_num_procs();
#else
    n = 1;
#endif
  }
  g_threads.store(n);
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
#ifdef MCPRL_HAVE_OPENBLAS
  // May re-create OpenBLAS's thread pool (always after a fork): not while a fork runs (see g_blas_fork).
  BlasCall call(true);
  openblas_set_num_threads(n);
#endif
}
int get_threads() { return g_threads.load() > 0 ? g_threads.load() : 1; }

namespace {

constexpr int MR = 6, NR = 16, KC = 256, NC = 4096;
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

// acc(6,16) = sum_p a[p*6+i] * b[p*16+j]; then C(i,j) += alpha*acc for i<mr, j<nr.
inline void kernel_6x16(int kc, const float* __restrict a, const float* __restrict b, float* c, int ldc,
                        float alpha, int mr, int nr) {
  v8 c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {}, c30 = {}, c31 = {}, c40 = {}, c41 = {},
     c50 = {}, c51 = {};
  for (int p = 0; p < kc; ++p) {
    v8 b0 = *(const v8*)(b + p * NR), b1 = *(const v8*)(b + p * NR + 8);
    const float* ap = a + p * MR;
    c00 += ap[0] * b0; c01 += ap[0] * b1;
    c10 += ap[1] * b0; c11 += ap[1] * b1;
    c20 += ap[2] * b0; c21 += ap[2] * b1;
    c30 += ap[3] * b0; c31 += ap[3] * b1;
    c40 += ap[4] * b0; c41 += ap[4] * b1;
    c50 += ap[5] * b0; c51 += ap[5] * b1;
  }
  v8 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (mr == MR && nr == NR) {
    for (int i = 0; i < MR; ++i) {
      v8u* row = (v8u*)(c + (size_t)i * ldc);
      row[0] += alpha * acc[i][0];
      row[1] += alpha * acc[i][1];
    }
  } else {
    alignas(32) float tile[MR][NR];
    for (int i = 0; i < MR; ++i) {
      *(v8*)&tile[i][0] = acc[i][0];
      *(v8*)&tile[i][8] = acc[i][1];
    }
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < nr; ++j) c[(size_t)i * ldc + j] += alpha * tile[i][j];
  }
}

// The dot products of R rows of A with NC rows of B, each summed in the one order dot_rows documents.
template <int R, int NC>
inline void dot_tile(int K, float alpha, const float* __restrict A, int lda, const float* __restrict B, int ldb,
                     float* C, int ldc) {
  v8 acc[R][NC] = {};
  const int k8 = K & ~7;
  for (int p = 0; p < k8; p += 8) {
    v8 b[NC];
    for (int c = 0; c < NC; ++c) b[c] = *(const v8u*)(B + (size_t)c * ldb + p);
    for (int r = 0; r < R; ++r) {
      const v8 a = *(const v8u*)(A + (size_t)r * lda + p);
      for (int c = 0; c < NC; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) {
      const float* ar = A + (size_t)r * lda;
      const float* bc = B + (size_t)c * ldb;
      float lane0 = acc[r][c][0];
      for (int p = k8; p < K; ++p) lane0 = __builtin_fmaf(ar[p], bc[p], lane0);
      float s = 0.0f + lane0;
      for (int l = 1; l < 8; ++l) s += acc[r][c][l];
      float& out = C[(size_t)r * ldc + c];
      out = __builtin_fmaf(alpha, s, out);
    }
}

// Columns [0, NC) of dot_rows, rows in blocks of kDotRows.
template <int NC>
void dot_cols(int M, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  int i = 0;
  for (; i + kDotRows <= M; i += kDotRows)
    dot_tile<kDotRows, NC>(K, alpha, A + (size_t)i * lda, lda, B, ldb, C + (size_t)i * ldc, ldc);
  const float* a = A + (size_t)i * lda;
  float* c = C + (size_t)i * ldc;
  switch (M - i) {
    case 3: dot_tile<3, NC>(K, alpha, a, lda, B, ldb, c, ldc); break;
    case 2: dot_tile<2, NC>(K, alpha, a, lda, B, ldb, c, ldc); break;
    case 1: dot_tile<1, NC>(K, alpha, a, lda, B, ldb, c, ldc); break;
    default: break;
  }
}

// The packed product of gemm_portable with an MR x NR register-tile kernel: KC-deep slices of op(A) packed as MR-row
// panels and of op(B) as NR-column panels (zero-padded), then every (row panel, column panel) tile. Each element of
// C is accumulated over each KC slice in order of p by the kernel, then added to C once per slice: the same
// arithmetic whatever MR and NR, so the AVX2 and AVX-512 kernels give the same bits.
template <int MR_, int NR_, void (*Kernel)(int, const float*, const float*, float*, int, float, int, int)>
void packed(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
            int ldb, float* C, int ldc) {
  const int mpanels = (M + MR_ - 1) / MR_;
  // The packing buffers stay with the calling thread and only grow: a fresh allocation per product cost page
  // faults and zeroing on every prefill chunk (perf).
  static thread_local FloatBuffer apack, bpack;
  const size_t an = (size_t)mpanels * MR_ * KC, bn = (size_t)((std::min(N, NC) + NR_ - 1) / NR_) * NR_ * KC;
  if (apack.size < an) apack.allocate(an);
  if (bpack.size < bn) bpack.allocate(bn);
  for (int jc = 0; jc < N; jc += NC) {
    const int nc = std::min(NC, N - jc);
    const int npanels = (nc + NR_ - 1) / NR_;
    for (int pc = 0; pc < K; pc += KC) {
      const int kc = std::min(KC, K - pc);
      float* ap = apack.data;
      float* bp = bpack.data;
      const long ntiles = (long)npanels * mpanels;
      // One parallel region per slice, its three loops separated by the barriers of `omp for`: a region of its own
      // for each woke the team three times per slice, which short prompts felt (perf: futex wake-ups).
#pragma omp parallel
      {
        // op(A)[:, pc:pc+kc] as panels of MR_ rows: ap[panel][p][i].
#pragma omp for schedule(static)
        for (int ip = 0; ip < mpanels; ++ip) {
          float* dst = ap + (size_t)ip * MR_ * kc;
          for (int i = 0; i < MR_; ++i) {
            const int r = ip * MR_ + i;
            if (r >= M) for (int p = 0; p < kc; ++p) dst[p * MR_ + i] = 0.0f;
            else if (transA) for (int p = 0; p < kc; ++p) dst[p * MR_ + i] = A[(size_t)(pc + p) * lda + r];
            else for (int p = 0; p < kc; ++p) dst[p * MR_ + i] = A[(size_t)r * lda + pc + p];
          }
        }
        // op(B)[pc:pc+kc, jc:jc+nc] as panels of NR_ columns: bp[panel][p][j].
#pragma omp for schedule(static)
        for (int jp = 0; jp < npanels; ++jp) {
          float* dst = bp + (size_t)jp * NR_ * kc;
          for (int j = 0; j < NR_; ++j) {
            const int col = jc + jp * NR_ + j;
            if (col >= jc + nc) for (int p = 0; p < kc; ++p) dst[p * NR_ + j] = 0.0f;
            else if (transB) for (int p = 0; p < kc; ++p) dst[p * NR_ + j] = B[(size_t)col * ldb + pc + p];
            else for (int p = 0; p < kc; ++p) dst[p * NR_ + j] = B[(size_t)(pc + p) * ldb + col];
          }
        }
        // Tiles, column panel outer so one B panel stays in cache across row panels.
#pragma omp for schedule(static)
        for (long t = 0; t < ntiles; ++t) {
          const int jp = (int)(t / mpanels), ip = (int)(t % mpanels);
          const int mr = std::min(MR_, M - ip * MR_), nr = std::min(NR_, nc - jp * NR_);
          Kernel(kc, ap + (size_t)ip * MR_ * kc, bp + (size_t)jp * NR_ * kc,
                 C + (size_t)ip * MR_ * ldc + jc + jp * NR_, ldc, alpha, mr, nr);
        }
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The AVX-512 tile: 8 rows x 32 columns (two 16-lane registers a row), compiled for AVX-512F alone and used only
// where the CPU has it (g_avx512). Per element exactly kernel_6x16's arithmetic: fused multiply-adds over p in
// order from 0, then C += alpha * acc fused.
constexpr int MR16 = 8, NR16 = 32;
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

__attribute__((target("avx512f"))) void kernel_8x32(int kc, const float* __restrict a, const float* __restrict b,
                                                     float* c, int ldc, float alpha, int mr, int nr) {
  v16 acc[MR16][2] = {};
  // Four steps of p per loop iteration (the order of every sum unchanged): the loop's own instructions otherwise cost
  // a tenth of the rate (measured).
#pragma GCC unroll 4
  for (int p = 0; p < kc; ++p) {
    const v16 b0 = *(const v16*)(b + p * NR16), b1 = *(const v16*)(b + p * NR16 + 16);
    const float* ap = a + p * MR16;
#pragma GCC unroll 8
    for (int i = 0; i < MR16; ++i) {
      acc[i][0] += ap[i] * b0;
      acc[i][1] += ap[i] * b1;
    }
  }
  if (mr == MR16 && nr == NR16) {
#pragma GCC unroll 8
    for (int i = 0; i < MR16; ++i) {
      v16u* row = (v16u*)(c + (size_t)i * ldc);
      row[0] += alpha * acc[i][0];
      row[1] += alpha * acc[i][1];
    }
  } else {
    alignas(64) float tile[MR16][NR16];
    for (int i = 0; i < MR16; ++i) {
      *(v16*)&tile[i][0] = acc[i][0];
      *(v16*)&tile[i][16] = acc[i][1];
    }
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < nr; ++j) c[(size_t)i * ldc + j] += alpha * tile[i][j];
  }
}

bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }
#else
constexpr int MR16 = MR, NR16 = NR;
constexpr auto kernel_8x32 = kernel_6x16;
bool cpu_has_avx512() { return false; }
#endif

std::atomic<bool> g_avx512{cpu_has_avx512()};

}  // namespace

void dot_rows(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  static_assert(kDotRows == 4 && kDotCols == 3,
                "dot_cols handles remainders of up to 3 rows; the switch below, up to 3 columns");
  // One or two rows: B's rows one at a time, a single stream through memory (three side by side read a weight
  // that does not fit in cache a quarter slower, and there is little reuse of A's vectors to gain).
  const int cols = M <= 2 ? 1 : kDotCols;
  for (int j = 0; j < N; j += cols) {
    const float* b = B + (size_t)j * ldb;
    switch (std::min(cols, N - j)) {
      case 3: dot_cols<3>(M, K, alpha, A, lda, b, ldb, C + j, ldc); break;
      case 2: dot_cols<2>(M, K, alpha, A, lda, b, ldb, C + j, ldc); break;
      default: dot_cols<1>(M, K, alpha, A, lda, b, ldb, C + j, ldc); break;
    }
  }
}

void gemm_portable(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  // C = beta*C first; the microkernel then only accumulates.
  if (beta != 1.0f) {
#pragma omp parallel for schedule(static) if ((size_t)M * N > 65536)
    for (int i = 0; i < M; ++i) {
      float* ci = C + (size_t)i * ldc;
      if (beta == 0.0f) std::memset(ci, 0, sizeof(float) * N);
      else for (int j = 0; j < N; ++j) ci[j] *= beta;
    }
  }
  if (K <= 0 || alpha == 0.0f) return;
  // Few rows times a row-major weight (decode: x W^T): packing W would double the memory traffic of
  // what is a matrix-vector product, so take dot products directly (dot_rows), in parallel over blocks of
  // output columns. Each element is one dot product in a fixed order, so a row's result does not depend on M
  // (row-wise mode) nor on the thread count.
  if (dot_path(transA, transB, M)) {
    const int blocks = (N + kDotCols - 1) / kDotCols;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; ++b) {
      const int j = b * kDotCols;
      dot_rows(M, std::min(kDotCols, N - j), K, alpha, A, lda, B + (size_t)j * ldb, ldb, C + j, ldc);
    }
    return;
  }
  if (g_avx512.load()) packed<MR16, NR16, kernel_8x32>(transA, transB, M, N, K, alpha, A, lda, B, ldb, C, ldc);
  else packed<MR, NR, kernel_6x16>(transA, transB, M, N, K, alpha, A, lda, B, ldb, C, ldc);
}

bool gemm_avx512() { return g_avx512.load(); }
bool gemm_set_avx512(bool on) {
  g_avx512.store(on && cpu_has_avx512());
  return g_avx512.load();
}

void gemm_blas(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
#ifdef MCPRL_HAVE_OPENBLAS
  if (M <= 0 || N <= 0) return;
  BlasCall call(false);
  g_blas_calls.fetch_add(1, std::memory_order_relaxed);
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
#else
  (void)transA; (void)transB; (void)M; (void)N; (void)K; (void)alpha; (void)A; (void)lda; (void)B; (void)ldb;
  (void)beta; (void)C; (void)ldc;
  FAIL("this build of the addon has no OpenBLAS");
#endif
}

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  // A few rows times a weight (decode steps, LM head for sampling) go to the portable kernel's direct
  // dot-product path, and everything in blocked mode to its packed kernel (gemm.h).
  if (gemm_have_blas() && !g_portable.load() && !t_blocked && !dot_path(transA, transB, M))
    gemm_blas(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    gemm_portable(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace mcprl
