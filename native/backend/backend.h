// The backend seam: every op the model runs, as a table of function pointers with the CPU signatures
// (outputs, inputs, sizes). The CPU backend fills it from native/ops/*.cc. A CUDA backend fills the same
// table from native/cuda/*.cu (device pointers, same argument order) and the model code stays unchanged.
// The model takes every buffer from the backend's `memory`, moves data with its copies, and hands small host
// arrays (token ids, positions, loss rows) to the ops through `staged`; on the CPU all of that is the host.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../core/common.h"
#include "../ops/attention.h"
#include "../ops/linear.h"
#include "../ops/rope.h"
#include "../core/weight.h"
#include "../train/optim.h"

namespace mcprl {

// One copy of `count` floats within a backend's memory (copy_rows takes many at once).
struct RowCopy {
  float* dst;
  const float* src;
  size_t count;
};

struct Backend {
  const char* name;
  void (*gemm)(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc);
  // C = alpha A op(W) + beta C with a frozen weight kept as f32 or 16-bit (gemm.h).
  void (*gemm_w)(bool transW, int M, int N, int K, float alpha, const float* A, int lda, WeightRef W, int ldw,
                 float beta, float* C, int ldc);
  void (*embedding_forward)(float* out, const int32_t* ids, WeightRef wte, int T, int C);
  void (*rmsnorm_forward)(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps);
  void (*rmsnorm_backward)(float* dx, float* dw, const float* dout, const float* x, const float* w,
                           const float* rstd, int N, int C);
  void (*rope_forward)(float* x, const int32_t* pos, const float* inv_freq, int T, int H, int D);
  void (*rope_backward)(float* dx, const int32_t* pos, const float* inv_freq, int T, int H, int D);
  void (*attention_forward)(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H,
                            int Hkv, int D);
  void (*attention_backward)(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                             const float* v, const float* out, const float* lse, const int* cu_seqlens, int nseq,
                             int H, int Hkv, int D);
  void (*swiglu_forward)(float* out, const float* gate, const float* up, long N);
  void (*swiglu_backward)(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long N);
  void (*linear_forward)(float* y, const float* x, WeightRef W, const float* b, int N, int in, int out);
  void (*linear_backward)(float* dx, const float* dy, WeightRef W, int N, int in, int out);
  void (*lora_forward)(float* y, float* xa, const float* x, const LoraView& l, int N, int in, int out);
  void (*lora_backward)(float* dx, float* dA, float* dB, float* dh, const float* dy, const float* x,
                        const float* xa, const LoraView& l, int N, int in, int out);
  void (*lm_head_forward)(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                          const int32_t* targets, int N, int C, int V, float* scratch, int chunk, const float* inv_temp,
                          const int32_t* mask_idx, const uint32_t* masks);
  void (*lm_head_backward)(float* dh, const float* dlogp, const float* g, WeightRef W, const int32_t* targets,
                           int N, int C, const float* inv_temp);
  void (*logits_forward)(float* z, const float* h, WeightRef W, int N, int C, int V);

  // Where the tensors the ops read and write live: null is host memory (the CPU), else the backend's own.
  const Allocator* memory;
  void (*copy)(void* dst, const void* src, size_t bytes);       // within the backend's memory
  void (*copy_rows)(const RowCopy* copies, int n);               // n copies within it (a host array of them)
  void (*upload)(void* dst, const void* host, size_t bytes);    // host -> backend, after the work issued before
  void (*download)(void* host, const void* src, size_t bytes);  // backend -> host, after the work issued before
  void (*zero)(void* p, size_t bytes);
  // y (n) = a + b, the residual adds; y may alias a or b.
  void (*add)(float* y, const float* a, const float* b, long n);
  // dst (M, C) = the rows rows[j] of src (gather), and dst's rows rows[j] += src (M, C) (scatter; rows
  // distinct). `rows` is in the backend's memory.
  void (*gather_rows)(float* dst, const float* src, const int32_t* rows, int M, int C);
  void (*scatter_add_rows)(float* dst, const float* src, const int32_t* rows, int M, int C);
  // The optimiser (train/optim.h) where the adapter lives: the L2 norm of x (n floats) to the host, accumulated
  // in double in an order fixed per backend; x *= s; one AdamW step on the flat buffers.
  double (*norm)(const float* x, size_t n);
  void (*scale)(float* x, float s, size_t n);
  void (*adamw)(float* param, const float* grad, float* m, float* v, size_t n, long step, float lr,
                const AdamWConfig& c);
};

const Backend& cpu_backend();
// The CPU backend with its memory declared elsewhere (test only: src/engine/backend-choice.ts's cpu-staged): every
// buffer from a guarded arena that host code cannot read or write (a fault there names the backend) except inside
// the table's own entries, each of which checks that the tensors it is handed are in that arena. A run on it is the
// CPU run bit for bit when every host<->backend move goes through upload/download (native/backend/backend_staged.cc).
const Backend& cpu_staged_backend();

// `host` (n elements) where the backend's ops can read it: the array itself when the backend's memory is the
// host's, else a copy in `stage` (grown on demand, reused by the next call with the same stage).
template <typename T>
const T* staged(const Backend& b, AlignedBuffer<T>& stage, const T* host, size_t n) {
  if (!b.memory || n == 0) return host;
  if (stage.size < n || stage.where != b.memory) stage.allocate(n, b.memory);
  b.upload(stage.data, host, n * sizeof(T));
  return stage.data;
}

}  // namespace mcprl
