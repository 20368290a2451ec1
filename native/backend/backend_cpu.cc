#include "backend.h"

#include <cstring>

#include "../kernels/gemm.h"
#include "../ops/embedding.h"
#include "../ops/lm_head.h"
#include "../ops/rmsnorm.h"
#include "../ops/swiglu.h"
#include "../train/optim.h"

namespace mcprl {

static void host_copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
static void host_zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }
static void host_copy_rows(const RowCopy* c, int n) {
  for (int i = 0; i < n; ++i) std::memcpy(c[i].dst, c[i].src, sizeof(float) * c[i].count);
}

static void add(float* y, const float* a, const float* b, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

static void gather_rows(float* dst, const float* src, const int32_t* rows, int M, int C) {
#pragma omp parallel for schedule(static)
  for (int j = 0; j < M; ++j) std::memcpy(dst + (size_t)j * C, src + (size_t)rows[j] * C, sizeof(float) * C);
}

// Serial: rows are distinct, but the order of the additions stays the one the CPU engine always had.
static void scatter_add_rows(float* dst, const float* src, const int32_t* rows, int M, int C) {
  for (int j = 0; j < M; ++j) {
    float* d = dst + (size_t)rows[j] * C;
    const float* s = src + (size_t)j * C;
    for (int k = 0; k < C; ++k) d[k] += s[k];
  }
}

static void scale(float* x, float s, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

const Backend& cpu_backend() {
  static const Backend be = {
      "cpu",
      gemm,
      gemm_w,
      embedding_forward,
      rmsnorm_forward,
      rmsnorm_backward,
      rope_forward,
      rope_backward,
      attention_forward,
      attention_backward,
      swiglu_forward,
      swiglu_backward,
      linear_forward,
      linear_backward,
      lora_forward,
      lora_backward,
      lm_head_forward,
      lm_head_backward,
      logits_forward,
      nullptr,  // host memory
      host_copy,
      host_copy_rows,
      host_copy,
      host_copy,
      host_zero,
      add,
      gather_rows,
      scatter_add_rows,
      grad_norm,
      scale,
      adamw_step,
  };
  return be;
}

}  // namespace mcprl
