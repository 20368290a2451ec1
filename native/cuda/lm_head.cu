// The fused LM head + log-softmax on the device (ops/lm_head.h): per row n, logp_n = z[target] − logsumexp(z),
// lse, entropy, and g_n = pᵀW (saved so the backward is O(N·C)); per-row temperature and allowed-token sets.
//
// Never (N, V) in memory: rows go through in blocks of `chunk`, and within a block the vocabulary goes through in
// chunks of VCHUNK columns with an online log-sum-exp. For each (rows x VCHUNK) block:
//   1. Z = h Wcᵀ on the tensor cores (gemm_w: bf16 operands, f32 accumulation; f32 for an f32 head),
//   2. one kernel per row: tempered, masked logits; the running max m moves to max(m, chunk max); the running
//      sums Σ e and Σ e (z − m) are rescaled by f = exp(m_old − m_new) and the chunk's terms added; Z is
//      overwritten with e = exp(z − m_new) (≤ 1, so rounding it to bf16 for the next product is harmless);
//   3. g = f · g + E Wc (the rows of g are rescaled by f, then one more product with beta = 1).
// At the end lse = m + log Σe, logp = z_t − lse, entropy = log Σe − Σe(z − m) / Σe, g /= Σe.
// Two (N, V, C) products, as on the CPU. Running sums are kept in double across chunks (within a chunk, a
// fixed-order f32 tree reduction), like the CPU op's blocked sums.
#include <algorithm>
#include <cmath>

#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

namespace {

constexpr int VCHUNK = 16384;  // vocabulary columns per block: 151,936 (Qwen3) is 10 chunks
constexpr int LM_THREADS = 512;

struct RowState {
  double sum, wsum;  // Σ e, Σ e (z − mx) over the columns seen so far, relative to mx
  float mx, zt;      // running max of the tempered, masked logits; the target's tempered logit
  float resc;        // this chunk's rescale factor for g (then 1 / Σ e at the end)
};

__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = lane < nw ? red[lane] : -INFINITY;
  return warp_max(s);
}

__global__ void lm_init_kernel(RowState* st, int m) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) st[i] = RowState{0.0, 0.0, -INFINITY, 0.0f, 0.0f};
}

// One block per row of the block: the chunk's columns [v0, v0 + vc) of row n0 + i are Z[i * vc ...].
__global__ void __launch_bounds__(LM_THREADS) lm_chunk_kernel(float* __restrict__ Z, RowState* __restrict__ st,
                                                              const float* __restrict__ inv_temp,
                                                              const int32_t* __restrict__ mask_idx,
                                                              const uint32_t* __restrict__ masks, size_t words,
                                                              int n0, int v0, int vc) {
  __shared__ float red[32];
  const int i = blockIdx.x, n = n0 + i;
  float* z = Z + (size_t)i * vc;
  const float s = inv_temp ? inv_temp[n] : 1.0f;
  const uint32_t* allow = (mask_idx && mask_idx[n] >= 0) ? masks + (size_t)mask_idx[n] * words : nullptr;
  float lmax = -INFINITY;
  for (int c = threadIdx.x; c < vc; c += blockDim.x) {
    const int v = v0 + c;
    const float t = z[c] * s;
    z[c] = t;
    const bool ok = !allow || ((allow[v >> 5] >> (v & 31)) & 1u);
    if (ok) lmax = fmaxf(lmax, t);
  }
  const float cmax = block_max(lmax, red);  // its barriers also make every tempered z visible to every thread
  const RowState old = st[i];
  const float mnew = fmaxf(old.mx, cmax);
  float ls = 0.0f, lws = 0.0f;
  for (int c = threadIdx.x; c < vc; c += blockDim.x) {
    const int v = v0 + c;
    const bool ok = (!allow || ((allow[v >> 5] >> (v & 31)) & 1u)) && mnew != -INFINITY;
    const float d = z[c] - mnew;
    const float e = ok ? expf(d) : 0.0f;  // masked tokens get probability 0
    ls += e;
    lws += ok ? e * d : 0.0f;
    z[c] = e;
  }
  const float S = block_sum(ls, red), WS = block_sum(lws, red);
  if (threadIdx.x == 0) {
    RowState ns = old;  // ns.zt: set by lm_target_kernel, launched before this kernel
    if (mnew == -INFINITY) {
      ns.resc = 1.0f;  // nothing allowed seen yet: g stays 0
    } else {
      const bool first = old.mx == -INFINITY;  // old sums are 0: skip them (0 · inf would be NaN)
      const double f = first ? 0.0 : exp((double)old.mx - (double)mnew);
      ns.wsum = first ? (double)WS : f * (old.wsum + old.sum * ((double)old.mx - (double)mnew)) + (double)WS;
      ns.sum = (first ? 0.0 : f * old.sum) + (double)S;
      ns.mx = mnew;
      ns.resc = (float)f;
    }
    st[i] = ns;
  }
}

// The target's tempered logit, taken from the chunk that holds it before lm_chunk_kernel overwrites Z.
__global__ void lm_target_kernel(const float* __restrict__ Z, RowState* __restrict__ st,
                                 const int32_t* __restrict__ targets, const float* __restrict__ inv_temp, int n0,
                                 int m, int v0, int vc) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int t = targets[n0 + i];
  if (t >= v0 && t < v0 + vc) st[i].zt = Z[(size_t)i * vc + (t - v0)] * (inv_temp ? inv_temp[n0 + i] : 1.0f);
}

// g rows (m, C) *= the row's rescale factor.
__global__ void lm_scale_rows_kernel(float* __restrict__ g, const RowState* __restrict__ st, int m, int C) {
  const long total = (long)m * C;
  for (long k = blockIdx.x * (long)blockDim.x + threadIdx.x; k < total; k += (long)gridDim.x * blockDim.x)
    g[k] *= st[k / C].resc;
}

__global__ void lm_finish_kernel(float* __restrict__ logp, float* __restrict__ lse, float* __restrict__ entropy,
                                 RowState* __restrict__ st, int n0, int m) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  RowState& s = st[i];
  const double log_sum = log(s.sum);
  lse[n0 + i] = (float)((double)s.mx + log_sum);
  logp[n0 + i] = (float)((double)(s.zt - s.mx) - log_sum);
  if (entropy) entropy[n0 + i] = (float)(log_sum - s.wsum / s.sum);
  s.resc = (float)(1.0 / s.sum);
}

__global__ void lm_backward_kernel(float* __restrict__ dh, const float* __restrict__ dlogp,
                                   const float* __restrict__ g, const void* W, WDtype wt,
                                   const int32_t* __restrict__ targets, int C, const float* __restrict__ inv_temp) {
  const int n = blockIdx.x;
  const float d = inv_temp ? dlogp[n] * inv_temp[n] : dlogp[n];
  const size_t base = (size_t)targets[n] * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    dh[(size_t)n * C + c] = d * (load_w(W, wt, base + c) - g[(size_t)n * C + c]);
}

unsigned grid_for(long n, int threads) { return (unsigned)std::min<long>(cdiv(n, threads), 65535L * 16); }

}  // namespace

void logits_forward(float* z, const float* h, WeightRef W, int N, int C, int V) {
  gemm_w(true, N, V, C, 1.0f, h, C, W, C, 0.0f, z, V);
}

void lm_head_forward(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                     const int32_t* targets, int N, int C, int V, float* scratch, int chunk, const float* inv_temp,
                     const int32_t* mask_idx, const uint32_t* masks) {
  (void)scratch;
  CHECK(chunk > 0, "lm_head_forward: chunk must be positive");
  if (N == 0) return;
  const int rows = std::min(chunk, N);
  const int vcw = std::min(VCHUNK, V);
  auto* Z = static_cast<float*>(workspace(WS_LMHEAD_Z, (size_t)rows * vcw * sizeof(float)));
  auto* st = static_cast<RowState*>(workspace(WS_LMHEAD_STATE, (size_t)rows * sizeof(RowState)));
  const size_t words = ((size_t)V + 31) / 32;
  for (int n0 = 0; n0 < N; n0 += chunk) {
    const int m = std::min(chunk, N - n0);
    float* gb = g ? g + (size_t)n0 * C : nullptr;
    lm_init_kernel<<<grid_for(m, 256), 256, 0, stream()>>>(st, m);
    CUDA_LAUNCHED("lm_head init");
    if (gb) CUDA_CHECK(cudaMemsetAsync(gb, 0, (size_t)m * C * sizeof(float), stream()));
    for (int v0 = 0; v0 < V; v0 += VCHUNK) {
      const int vc = std::min(VCHUNK, V - v0);
      const WeightRef Wc = weight_offset(W, (size_t)v0 * C);
      gemm_w(true, m, vc, C, 1.0f, h + (size_t)n0 * C, C, Wc, C, 0.0f, Z, vc);
      lm_target_kernel<<<grid_for(m, 256), 256, 0, stream()>>>(Z, st, targets, inv_temp, n0, m, v0, vc);
      CUDA_LAUNCHED("lm_head target");
      lm_chunk_kernel<<<m, LM_THREADS, 0, stream()>>>(Z, st, inv_temp, mask_idx, masks, words, n0, v0, vc);
      CUDA_LAUNCHED("lm_head chunk");
      if (gb) {
        lm_scale_rows_kernel<<<grid_for((long)m * C, 256), 256, 0, stream()>>>(gb, st, m, C);
        CUDA_LAUNCHED("lm_head rescale g");
        gemm_w(false, m, C, vc, 1.0f, Z, vc, Wc, C, 1.0f, gb, C);
      }
    }
    lm_finish_kernel<<<grid_for(m, 256), 256, 0, stream()>>>(logp, lse, entropy, st, n0, m);
    CUDA_LAUNCHED("lm_head finish");
    if (gb) {
      lm_scale_rows_kernel<<<grid_for((long)m * C, 256), 256, 0, stream()>>>(gb, st, m, C);
      CUDA_LAUNCHED("lm_head normalise g");
    }
  }
}

void lm_head_backward(float* dh, const float* dlogp, const float* g, WeightRef W, const int32_t* targets, int N, int C,
                      const float* inv_temp) {
  if (N == 0) return;
  lm_backward_kernel<<<N, 256, 0, stream()>>>(dh, dlogp, g, W.data, W.dtype, targets, C, inv_temp);
  CUDA_LAUNCHED("lm_head_backward");
}

}  // namespace cuda
}  // namespace mcprl
