// Single-precision GEMM, row-major: C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C.
// op(A) = A^T when transA (then A is stored (K,M) with leading dimension lda), likewise for B.
//
// Two kernels: OpenBLAS cblas_sgemm when the addon was built with it (MCPRL_HAVE_OPENBLAS), and a
// portable blocked/packed kernel. MCPRL_PORTABLE_GEMM=1 in the environment (read when the addon loads)
// or gemm_set_portable(true) forces the portable kernel so tests cover both paths.
#pragma once

#include "../core/weight.h"

namespace mcprl {

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// The portable kernel alone (the benchmark compares it with OpenBLAS).
void gemm_portable(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc);

// The packed kernel's instruction set: AVX-512 (8 x 32 tiles) where the CPU has it, detected when the addon loads,
// else AVX2 (6 x 16). Both sum every element in the same order, so they give the same bits; gemm_set_avx512(false)
// forces AVX2 (tests compare the two) and (true) returns to AVX-512 where the CPU has it. Returns the kernel now on.
bool gemm_avx512();
bool gemm_set_avx512(bool on);

// OpenBLAS alone; throws when the addon was built without it.
void gemm_blas(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc);

// Products of at most this many rows times a row-major weight (x W^T: decode steps, the LM head of a few rows)
// take the direct dot-product path: packing W would double the memory traffic of what is a matrix-vector product,
// and OpenBLAS's small-M sgemm is several times slower for these shapes (measured here).
constexpr int kGemmSmallRows = 8;

// C(i, j) += alpha <A_i, B_j> for i < M, j < N (A is M x K, B is N x K, both row-major), on the calling thread:
// the dot-product path of x W^T. Every element is summed in one fixed order, whichever block of the call it falls
// in: eight lanes accumulated by fused multiply-adds over the first K & ~7 terms, the remaining terms fused into
// lane 0 one by one, then 0 + lane 0 + lane 1 + ... + lane 7 left to right, and C(i, j) = fma(alpha, sum, C(i, j)).
// The work goes in register tiles of kDotRows rows x kDotCols columns, which load each vector of A and B once
// per tile instead of once per element.
constexpr int kDotRows = 4, kDotCols = 3;
void dot_rows(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc);

// Row-wise mode (per thread): while on, every x W^T product (transB, !transA) takes the per-row dot-product
// path whatever M is, so one row's result does not depend on which other rows share the call. Inference
// turns it on around decode steps and sampling (RowwiseGemm below): which requests share a decode step
// depends on timing, and a request's tokens must not.
void gemm_set_rowwise(bool on);
bool gemm_rowwise();
struct RowwiseGemm {
  bool prev;
  RowwiseGemm() : prev(gemm_rowwise()) { gemm_set_rowwise(true); }
  ~RowwiseGemm() { gemm_set_rowwise(prev); }
  RowwiseGemm(const RowwiseGemm&) = delete;
  RowwiseGemm& operator=(const RowwiseGemm&) = delete;
};

// Blocked mode (per thread): while on, every product takes gemm_portable's packed kernel, whatever M and whether
// or not the build has OpenBLAS. Each element of C is then one fixed-order sum (over KC-deep blocks of K, each
// accumulated in a register tile) that depends on neither M, nor which other rows share the call, nor the thread
// count; OpenBLAS's sgemm blocks its rows by M, and the small-rows path above rounds otherwise. Prefill runs under
// it (BlockedGemm below, prefix_cache.cc): a prompt's rows are the same bits whether they are computed in one
// forward of many rows or as a cached prefix plus the rest. It takes precedence over row-wise mode.
void gemm_set_blocked(bool on);
bool gemm_blocked();
struct BlockedGemm {
  bool prev;
  BlockedGemm() : prev(gemm_blocked()) { gemm_set_blocked(true); }
  ~BlockedGemm() { gemm_set_blocked(prev); }
  BlockedGemm(const BlockedGemm&) = delete;
  BlockedGemm& operator=(const BlockedGemm&) = delete;
};

// C(M,N) = alpha * A(M,K) * op(W)(K,N) + beta * C with a frozen weight W in memory as f32 or 16-bit:
// op(W) = W^T (W stored (N,K), the x W^T of a projection or the LM head) when transW, else W (stored (K,N), the
// dy W of a projection's backward). f32 weights go to gemm() unchanged. 16-bit weights are widened to f32 in
// blocks (of W's rows) that then go through gemm(), or, on the row-wise/small-rows path of x W^T (not in blocked
// mode), kDotCols rows of W at a time into a per-thread buffer and through dot_rows, as gemm_portable's: one row's
// result never depends on which other rows share the call (decode stays batch-invariant), and equals the f32
// product's bit for bit.
void gemm_w(bool transW, int M, int N, int K, float alpha, const float* A, int lda, WeightRef W, int ldw, float beta,
            float* C, int ldc);

bool gemm_have_blas();
bool gemm_portable_forced();
void gemm_set_portable(bool on);
// Thread count for OpenMP regions and OpenBLAS; called at the start of every worker task because
// omp_set_num_threads only affects the calling thread.
void set_threads(int n);
int get_threads();

// OpenBLAS products run and forks seen since the addon loaded (0 and 0 without OpenBLAS); see g_blas_fork in
// gemm.cc: every fork of the process waits for the OpenBLAS products in flight.
struct BlasForkStats {
  long blas_calls;
  long forks;
};
BlasForkStats blas_fork_stats();

}  // namespace mcprl
