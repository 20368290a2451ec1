// The CUDA backend's ops: the signatures of native/ops/*.h (outputs, inputs, sizes; same shapes, same backward
// rule: parameter grads +=, activation grads =), in namespace mcprl::cuda, on DEVICE pointers.
// Differences from the CPU ops, each on purpose:
//   - 16-bit weights (bf16/f16) are multiplied on the tensor cores: the f32 activation is rounded to the
//     weight's 16-bit type first, products accumulate in f32 (what PyTorch does in bf16). So every op that
//     multiplies by a 16-bit weight agrees with the CPU op to bf16 accuracy (~1e-2 relative), not bit for bit.
//     f32 weights and the f32 LoRA path stay f32 (no TF32).
//   - attention: `segs` and `cu_seqlens` are HOST arrays (small metadata; the k/v pointers inside segs are
//     device pointers).
//   - lm_head_forward: `scratch` is unused (the logits of one (chunk rows x vocabulary chunk) block live in a
//     device workspace); `chunk` is still the number of rows per block.
// Only compiled by nvcc (native/cuda/*.cu); the CPU addon never includes it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../backend/backend.h"
#include "../ops/attention.h"
#include "../ops/linear.h"
#include "../train/optim.h"
#include "../core/weight.h"

namespace mcprl {
namespace cuda {

// ---- products (gemm.cu). Row-major, as native/kernels/gemm.h.
// C (M,N) = alpha op(A) op(B) + beta C, all f32 (f32 compute: cuBLAS without TF32, or the f32 tile kernel).
void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc);
// The same with 16-bit operands A and B of one type t (BF16 or F16), f32 C and f32 accumulation: tensor cores.
void gemm_half(WDtype t, bool transA, bool transB, int M, int N, int K, float alpha, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc);
// C (M,N) = alpha A op(W) + beta C with a frozen weight (gemm.h's gemm_w): f32 W -> gemm; 16-bit W -> A is
// rounded to W's type (into a workspace) and gemm_half runs.
void gemm_w(bool transW, int M, int N, int K, float alpha, const float* A, int lda, WeightRef W, int ldw, float beta,
            float* C, int ldc);
// Which matrix product runs: cuBLAS when libcublas.so.13 could be loaded (MCPRL_CUBLAS_DIR, then the loader's
// search path, then /usr/local/cuda/lib64), else the tiled kernels. MCPRL_CUDA_GEMM=fallback forces the
// kernels; gemm_force_fallback() likewise (the benchmark compares both).
bool gemm_have_cublas();
const char* gemm_cublas_path();  // the file loaded, or the reason none was
void gemm_force_fallback(bool on);
// dst (n) = src rounded to 16-bit type t (nearest, ties to even), on the device.
void to_half(uint16_t* dst, const float* src, size_t n, WDtype t);

// ---- ops, one file each
void embedding_forward(float* out, const int32_t* ids, WeightRef wte, int T, int C);
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int N, int C);
void rope_forward(float* x, const int32_t* pos, const float* inv_freq, int T, int H, int D);
void rope_backward(float* dx, const int32_t* pos, const float* inv_freq, int T, int H, int D);
void attention_forward(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H, int Hkv,
                       int D);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* cu_seqlens, int nseq, int H,
                        int Hkv, int D);
// The tensor-core attention kernels (bf16 operands, f32 accumulation; head_dim a multiple of 16) or the f32 ones.
// Default: tensor cores, unless MCPRL_CUDA_ATTENTION=f32; this call overrides both (the check runs each).
void attention_set_tensor_cores(bool on);
void swiglu_forward(float* out, const float* gate, const float* up, long N);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long N);
void linear_forward(float* y, const float* x, WeightRef W, const float* b, int N, int in, int out);
void linear_backward(float* dx, const float* dy, WeightRef W, int N, int in, int out);
// l.A / l.B are device pointers (f32).
void lora_forward(float* y, float* xa, const float* x, const LoraView& l, int N, int in, int out);
void lora_backward(float* dx, float* dA, float* dB, float* dh, const float* dy, const float* x, const float* xa,
                   const LoraView& l, int N, int in, int out);
void lm_head_forward(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                     const int32_t* targets, int N, int C, int V, float* scratch, int chunk, const float* inv_temp,
                     const int32_t* mask_idx, const uint32_t* masks);
void lm_head_backward(float* dh, const float* dlogp, const float* g, WeightRef W, const int32_t* targets, int N, int C,
                      const float* inv_temp);
void logits_forward(float* z, const float* h, WeightRef W, int N, int C, int V);
// AdamW on device buffers, torch.optim.AdamW semantics as native/train/optim.h (scalars computed on the host
// in double exactly as there).
void adamw_step(float* param, const float* grad, float* m, float* v, size_t n, long step, float lr,
                const AdamWConfig& c);
// Gradient clipping's halves: the L2 norm of x (to the host, in a fixed order), and x *= s.
double norm(const float* x, size_t n);
void scale(float* x, float s, size_t n);

// ---- memory (memory.cu): the Backend table's allocator, copies and data movement, and the bytes allocated
// through it (now, and the most at once since the last reset).
const Allocator& device_allocator();
size_t memory_bytes();
size_t memory_peak_bytes();
void memory_reset_peak();
void copy(void* dst, const void* src, size_t bytes);
void copy_rows(const RowCopy* copies, int n);
void upload(void* dst, const void* host, size_t bytes);
void download(void* host, const void* src, size_t bytes);
void zero(void* p, size_t bytes);
void add(float* y, const float* a, const float* b, long n);
void gather_rows(float* dst, const float* src, const int32_t* rows, int M, int C);
void scatter_add_rows(float* dst, const float* src, const int32_t* rows, int M, int C);

}  // namespace cuda

// The CUDA table for the backend seam (backend_cuda.cu).
const Backend& cuda_backend();

}  // namespace mcprl
