// Products with a 16-bit frozen weight (see gemm_w in gemm.h): widen, then the f32 kernels.
#include <algorithm>
#include <cstring>
#include <vector>

#include "../core/common.h"
#include "gemm.h"

namespace mcprl {

namespace {
// Floats of widened weight per block: 8 MB, large enough for sgemm to run at speed, small next to the model.
constexpr size_t kBlockFloats = size_t(1) << 21;
}  // namespace

void gemm_w(bool transW, int M, int N, int K, float alpha, const float* A, int lda, WeightRef W, int ldw, float beta,
            float* C, int ldc) {
  if (W.is_f32()) {
    gemm(false, transW, M, N, K, alpha, A, lda, W.f32(), ldw, beta, C, ldc);
    return;
  }
  if (M <= 0 || N <= 0) return;
  if (transW && !gemm_blocked() && (M <= kGemmSmallRows || gemm_rowwise())) {
    // The direct dot-product path (gemm_portable's dot_rows): C(i, j) = beta C(i, j) + alpha <A_i, W_j>, each block
    // of kDotCols rows of W widened once per call and reused by every row i.
    const int blocks = (N + kDotCols - 1) / kDotCols;
#pragma omp parallel
    {
      std::vector<float> wj((size_t)kDotCols * std::max(K, 0));
#pragma omp for schedule(static)
      for (int b = 0; b < blocks; ++b) {
        const int j = b * kDotCols, n = std::min(kDotCols, N - j);
        if (beta != 1.0f)
          for (int i = 0; i < M; ++i)
            for (float *c = C + (size_t)i * ldc + j, *end = c + n; c < end; ++c) *c = beta == 0.0f ? 0.0f : beta * *c;
        if (K > 0) for (int r = 0; r < n; ++r) widen(wj.data() + (size_t)r * K, W, (size_t)(j + r) * ldw, (size_t)K);
        dot_rows(M, n, K, alpha, A, lda, wj.data(), K, C + j, ldc);
      }
    }
    return;
  }
  // Blocks of W's rows, widened in parallel, each one product with the f32 kernel. transW: rows of W are output
  // columns [j0, j0 + nb) with the full K; else rows of W are the K range [k0, k0 + kb), accumulated.
  const int rows = transW ? N : K, cols = transW ? K : N;
  if (rows <= 0 || cols <= 0) {
    gemm(false, transW, M, N, K, alpha, A, lda, nullptr, std::max(ldw, 1), beta, C, ldc);
    return;
  }
  const int nb = (int)std::max<size_t>(16, std::min<size_t>((size_t)rows, kBlockFloats / (size_t)cols));
  FloatBuffer buf;
  buf.allocate((size_t)nb * cols);
  for (int r0 = 0; r0 < rows; r0 += nb) {
    const int n = std::min(nb, rows - r0);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; ++r) widen(buf.data + (size_t)r * cols, W, (size_t)(r0 + r) * ldw, (size_t)cols);
    if (transW)
      gemm(false, true, M, n, K, alpha, A, lda, buf.data, cols, beta, C + r0, ldc);
    else
      gemm(false, false, M, N, n, alpha, A + r0, lda, buf.data, cols, r0 == 0 ? beta : 1.0f, C, ldc);
  }
}

}  // namespace mcprl
