// Single-precision GEMM, row-major: C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C.
// op(A) = A^T when transA (then A is stored (K,M) with leading dimension lda), likewise for B.
//
// Two kernels: OpenBLAS cblas_sgemm when the addon was built with it (MCPRL_HAVE_OPENBLAS), and a
// portable blocked/packed kernel. MCPRL_PORTABLE_GEMM=1 in the environment (read when the addon loads)
// or gemm_set_portable(true) forces the portable kernel so tests cover both paths.
#pragma once

namespace mcprl {

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// The portable kernel alone (the benchmark compares it with OpenBLAS).
void gemm_portable(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc);

// OpenBLAS alone; throws when the addon was built without it.
void gemm_blas(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc);

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

bool gemm_have_blas();
bool gemm_portable_forced();
void gemm_set_portable(bool on);
// Thread count for OpenMP regions and OpenBLAS; called at the start of every worker task because
// omp_set_num_threads only affects the calling thread.
void set_threads(int n);
int get_threads();

}  // namespace mcprl
