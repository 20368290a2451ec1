// Causal grouped-query attention on the device (ops/attention.h), flash-style: tiles of queries and keys in
// shared memory, an online softmax per query row, never a (T, T) score matrix per head. A query never sees
// keys of another packed sequence: each segment carries its own key/value pointers and the causal limit.
//
// Layout (as on the CPU): q/out (T, H, D), k/v (rows, Hkv, D), lse (T, H); head h reads kv head h / (H / Hkv).
// Tiles: BQ = BK = 32 rows, 128 threads. In the forward pass and for dq, 4 threads share one query row: each
// computes 8 of the tile's 32 scores and owns every 4th output column (D/4 f32 accumulators in registers).
// For dk/dv, 4 threads share one key row the same way. The sizes are a template parameter DM (32, 64, 128):
// head_dim is padded with zeros up to it. Q and K rows in shared memory are padded by one float, so the
// 4 rows a warp reads at one column fall in different banks.
//
// Two kernel families compute the same op:
//   - f32 on the CUDA cores (the `*_kernel` templates below): the reference on the device, for any head_dim up
//     to 128 and agreeing with the CPU op to 1e-4;
//   - bf16 on the tensor cores (the `*_tc` templates, WMMA 16x16x16 with f32 accumulation): tiles of 64 queries
//     and 64 keys, one warp per 16 rows; Q, K, V, dout, the probabilities and dS are rounded to bf16 where they
//     enter a product (as in FlashAttention), the online softmax, lse, delta and every accumulator stay f32. Used
//     when head_dim is a multiple of 16 (Qwen3's 128, 64) unless MCPRL_CUDA_ATTENTION=f32 (or
//     attention_set_tensor_cores(false)); agrees with the CPU op to bf16 accuracy (~1e-2), not 1e-4.
// Backward (packed sequences only, npast = 0) recomputes the probabilities from lse, as the CPU op does, in two
// kernels without atomics (deterministic): one per key tile for dk/dv looping over the query tiles and the
// group's query heads, one per query tile for dq looping over the key tiles.
#include <algorithm>
#include <cmath>
#include <vector>

#include <mma.h>

#include <cstdlib>
#include <cstring>

#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

namespace {

constexpr int BQ = 32, BK = 32, NT = 128;
static_assert(BQ == BK, "dk/dv starts its query tiles at the key tile's first row: the tiles must align");

struct DevSeg {
  int q0, nq, npast;
  const float* k;
  const float* v;
};
struct FwdTile { int seg, i0; };       // forward: segment, first query of the tile within the segment
struct SeqTile { int t0, n, i0; };     // backward: sequence's first row, its length, the tile's first row in it

__device__ __forceinline__ float group4_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float group4_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Loads rows [row0, row0 + nrows) of a (rows, heads * D) matrix's head block at column offset col into a
// (32, ld) shared tile, scaled by `mul`; columns >= D and rows beyond nrows are zero.
template <int DM>
__device__ __forceinline__ void load_tile(float* dst, int ld, const float* src, size_t row_stride, int row0, int nrows,
                                          int col, int D, float mul) {
  for (int idx = threadIdx.x; idx < 32 * DM; idx += NT) {
    const int i = idx / DM, c = idx % DM;
    float v = 0.0f;
    if (i < nrows && c < D) v = src[(size_t)(row0 + i) * row_stride + col + c] * mul;
    dst[i * ld + c] = v;
  }
}

template <int DM>
__global__ void __launch_bounds__(NT) attn_fwd_kernel(float* __restrict__ out, float* __restrict__ lse,
                                                     const float* __restrict__ q, const DevSeg* __restrict__ segs,
                                                     const FwdTile* __restrict__ tiles, int H, int Hkv, int D,
                                                     float scale) {
  extern __shared__ float sm[];
  constexpr int LD = DM + 1, PLD = BK + 1;
  float* Qs = sm;             // (BQ, LD), pre-scaled by 1/sqrt(D)
  float* Ks = Qs + BQ * LD;   // (BK, LD)
  float* Vs = Ks + BK * LD;   // (BK, DM)
  float* Ps = Vs + BK * DM;   // (BQ, PLD) probabilities of the current key tile
  const FwdTile tile = tiles[blockIdx.x];
  const DevSeg sg = segs[tile.seg];
  const int h = blockIdx.y, hk = h / (H / Hkv);
  const int nqt = min(BQ, sg.nq - tile.i0);
  const int r = threadIdx.x >> 2, sub = threadIdx.x & 3;
  const size_t qs = (size_t)H * D, kvs = (size_t)Hkv * D;
  load_tile<DM>(Qs, LD, q, qs, sg.q0 + tile.i0, nqt, h * D, D, scale);
  const int last_key = sg.npast + tile.i0 + nqt - 1;  // the tile's last query sees keys 0 .. last_key
  const int my_last = sg.npast + tile.i0 + r;         // this row's query sees keys 0 .. my_last
  float m = -INFINITY, l = 0.0f, acc[DM / 4];
#pragma unroll
  for (int c = 0; c < DM / 4; ++c) acc[c] = 0.0f;
  for (int j0 = 0; j0 <= last_key; j0 += BK) {
    __syncthreads();  // the previous tile's Ks/Vs are no longer read
    const int nk = min(BK, last_key + 1 - j0);
    load_tile<DM>(Ks, LD, sg.k, kvs, j0, nk, hk * D, D, 1.0f);
    load_tile<DM>(Vs, DM, sg.v, kvs, j0, nk, hk * D, D, 1.0f);
    __syncthreads();
    float s[BK / 4], tmax = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < BK / 4; ++jj) {
      const int j = sub + 4 * jj;
      float d = 0.0f;
#pragma unroll 16
      for (int c = 0; c < DM; ++c) d = fmaf(Qs[r * LD + c], Ks[j * LD + c], d);
      if (r >= nqt || j0 + j > my_last) d = -INFINITY;  // causal mask (and rows past the segment's end)
      s[jj] = d;
      tmax = fmaxf(tmax, d);
    }
    tmax = group4_max(tmax);
    const float mnew = fmaxf(m, tmax);
    // A row with no visible key yet (only rows past the segment's end) keeps m = -inf: guard exp(-inf + inf).
    const float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);
    float psum = 0.0f;
#pragma unroll
    for (int jj = 0; jj < BK / 4; ++jj) {
      const float p = mnew == -INFINITY ? 0.0f : expf(s[jj] - mnew);
      Ps[r * PLD + sub + 4 * jj] = p;
      psum += p;
    }
    psum = group4_sum(psum);
    l = l * alpha + psum;
    m = mnew;
    __syncwarp();  // row r's probabilities were written by the 4 lanes of this warp that read them next
#pragma unroll
    for (int c = 0; c < DM / 4; ++c) acc[c] *= alpha;
    for (int j = 0; j < BK; ++j) {
      const float p = Ps[r * PLD + j];
#pragma unroll
      for (int c = 0; c < DM / 4; ++c) acc[c] = fmaf(p, Vs[j * DM + sub + 4 * c], acc[c]);
    }
  }
  if (r < nqt) {
    const size_t row = (size_t)sg.q0 + tile.i0 + r;
    const float inv = 1.0f / l;
#pragma unroll
    for (int c = 0; c < DM / 4; ++c) {
      const int d = sub + 4 * c;
      if (d < D) out[row * qs + (size_t)h * D + d] = acc[c] * inv;
    }
    if (lse && sub == 0) lse[row * H + h] = m + logf(l);
  }
}

// delta (T, H) = rowsum(dout * out): one warp per (row, head).
__global__ void attn_delta_kernel(float* __restrict__ delta, const float* __restrict__ dout,
                                  const float* __restrict__ out, long rows, int D) {
  const long w = blockIdx.x * (long)(blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= rows) return;
  float s = 0.0f;
  for (int c = lane; c < D; c += 32) s = fmaf(dout[w * D + c], out[w * D + c], s);
  s = warp_sum(s);
  if (lane == 0) delta[w] = s;
}

// The backward's two dot products for one (query row, key row) pair: s = q . k (unscaled) and g = dout . v.
template <int DM>
__device__ __forceinline__ void score_and_dp(const float* q, const float* k, const float* g, const float* v, float& s,
                                             float& gv) {
  float a = 0.0f, b = 0.0f;
#pragma unroll 16
  for (int e = 0; e < DM; ++e) {
    a = fmaf(q[e], k[e], a);
    b = fmaf(g[e], v[e], b);
  }
  s = a;
  gv = b;
}

template <int DM>
__global__ void __launch_bounds__(NT) attn_bwd_dkdv_kernel(float* __restrict__ dk, float* __restrict__ dv,
                                                          const float* __restrict__ dout, const float* __restrict__ q,
                                                          const float* __restrict__ k, const float* __restrict__ v,
                                                          const float* __restrict__ lse,
                                                          const float* __restrict__ delta,
                                                          const SeqTile* __restrict__ tiles, int H, int Hkv, int D,
                                                          float scale) {
  extern __shared__ float sm[];
  constexpr int LD = DM + 1, PLD = BK + 1;
  float* Ks = sm;               // (BK, LD)
  float* Vs = Ks + BK * LD;     // (BK, LD)
  float* Qs = Vs + BK * LD;     // (BQ, LD)
  float* Gs = Qs + BQ * LD;     // (BQ, LD) dout
  float* Ps = Gs + BQ * LD;     // (BQ, PLD)
  float* Ss = Ps + BQ * PLD;    // (BQ, PLD) dS
  float* Ls = Ss + BQ * PLD;    // (BQ) lse
  float* Ds = Ls + BQ;          // (BQ) delta
  const SeqTile tile = tiles[blockIdx.x];
  const int hk = blockIdx.y, group = H / Hkv;
  const int c = threadIdx.x >> 2, sub = threadIdx.x & 3;  // this thread's key row in the tile
  const size_t qs = (size_t)H * D, kvs = (size_t)Hkv * D;
  const int nkt = min(BK, tile.n - tile.i0);
  load_tile<DM>(Ks, LD, k, kvs, tile.t0 + tile.i0, nkt, hk * D, D, 1.0f);
  load_tile<DM>(Vs, LD, v, kvs, tile.t0 + tile.i0, nkt, hk * D, D, 1.0f);
  const int my_key = tile.i0 + c;
  float ak[DM / 4], av[DM / 4];
#pragma unroll
  for (int e = 0; e < DM / 4; ++e) ak[e] = av[e] = 0.0f;
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    for (int q0 = tile.i0; q0 < tile.n; q0 += BQ) {
      const int nq = min(BQ, tile.n - q0);
      __syncthreads();
      load_tile<DM>(Qs, LD, q, qs, tile.t0 + q0, nq, h * D, D, 1.0f);
      load_tile<DM>(Gs, LD, dout, qs, tile.t0 + q0, nq, h * D, D, 1.0f);
      for (int i = threadIdx.x; i < BQ; i += NT) {
        Ls[i] = i < nq ? lse[(size_t)(tile.t0 + q0 + i) * H + h] : 0.0f;
        Ds[i] = i < nq ? delta[(size_t)(tile.t0 + q0 + i) * H + h] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int ii = 0; ii < BQ / 4; ++ii) {
        const int rr = sub + 4 * ii;
        float sdot, gdot;
        score_and_dp<DM>(Qs + rr * LD, Ks + c * LD, Gs + rr * LD, Vs + c * LD, sdot, gdot);
        const bool valid = rr < nq && c < nkt && my_key <= q0 + rr;
        const float p = valid ? expf(sdot * scale - Ls[rr]) : 0.0f;
        Ps[rr * PLD + c] = p;
        Ss[rr * PLD + c] = p * (gdot - Ds[rr]) * scale;
      }
      __syncthreads();
      for (int rr = 0; rr < BQ; ++rr) {
        const float p = Ps[rr * PLD + c], ds = Ss[rr * PLD + c];
#pragma unroll
        for (int e = 0; e < DM / 4; ++e) {
          av[e] = fmaf(p, Gs[rr * LD + sub + 4 * e], av[e]);
          ak[e] = fmaf(ds, Qs[rr * LD + sub + 4 * e], ak[e]);
        }
      }
    }
  }
  if (c < nkt) {
    const size_t row = (size_t)tile.t0 + my_key;
#pragma unroll
    for (int e = 0; e < DM / 4; ++e) {
      const int d = sub + 4 * e;
      if (d < D) {
        dk[row * kvs + (size_t)hk * D + d] = ak[e];
        dv[row * kvs + (size_t)hk * D + d] = av[e];
      }
    }
  }
}

template <int DM>
__global__ void __launch_bounds__(NT) attn_bwd_dq_kernel(float* __restrict__ dq, const float* __restrict__ dout,
                                                        const float* __restrict__ q, const float* __restrict__ k,
                                                        const float* __restrict__ v, const float* __restrict__ lse,
                                                        const float* __restrict__ delta,
                                                        const SeqTile* __restrict__ tiles, int H, int Hkv, int D,
                                                        float scale) {
  extern __shared__ float sm[];
  constexpr int LD = DM + 1, PLD = BK + 1;
  float* Qs = sm;             // (BQ, LD)
  float* Gs = Qs + BQ * LD;   // (BQ, LD) dout
  float* Ks = Gs + BQ * LD;   // (BK, LD)
  float* Vs = Ks + BK * LD;   // (BK, LD)
  float* Ss = Vs + BK * LD;   // (BQ, PLD) dS
  const SeqTile tile = tiles[blockIdx.x];
  const int h = blockIdx.y, hk = h / (H / Hkv);
  const int r = threadIdx.x >> 2, sub = threadIdx.x & 3;
  const size_t qs = (size_t)H * D, kvs = (size_t)Hkv * D;
  const int nqt = min(BQ, tile.n - tile.i0);
  load_tile<DM>(Qs, LD, q, qs, tile.t0 + tile.i0, nqt, h * D, D, 1.0f);
  load_tile<DM>(Gs, LD, dout, qs, tile.t0 + tile.i0, nqt, h * D, D, 1.0f);
  const size_t myrow = (size_t)tile.t0 + tile.i0 + r;
  const float L = r < nqt ? lse[myrow * H + h] : 0.0f;
  const float Dl = r < nqt ? delta[myrow * H + h] : 0.0f;
  const int my_q = tile.i0 + r;
  float acc[DM / 4];
#pragma unroll
  for (int e = 0; e < DM / 4; ++e) acc[e] = 0.0f;
  for (int j0 = 0; j0 < tile.i0 + nqt; j0 += BK) {
    const int nk = min(BK, tile.i0 + nqt - j0);
    __syncthreads();
    load_tile<DM>(Ks, LD, k, kvs, tile.t0 + j0, nk, hk * D, D, 1.0f);
    load_tile<DM>(Vs, LD, v, kvs, tile.t0 + j0, nk, hk * D, D, 1.0f);
    __syncthreads();
#pragma unroll
    for (int jj = 0; jj < BK / 4; ++jj) {
      const int j = sub + 4 * jj;
      float sdot, gdot;
      score_and_dp<DM>(Qs + r * LD, Ks + j * LD, Gs + r * LD, Vs + j * LD, sdot, gdot);
      const bool valid = r < nqt && j0 + j <= my_q;
      const float p = valid ? expf(sdot * scale - L) : 0.0f;
      Ss[r * PLD + j] = p * (gdot - Dl) * scale;
    }
    __syncwarp();
    for (int j = 0; j < BK; ++j) {
      const float ds = Ss[r * PLD + j];
#pragma unroll
      for (int e = 0; e < DM / 4; ++e) acc[e] = fmaf(ds, Ks[j * LD + sub + 4 * e], acc[e]);
    }
  }
  if (r < nqt) {
#pragma unroll
    for (int e = 0; e < DM / 4; ++e) {
      const int d = sub + 4 * e;
      if (d < D) dq[myrow * qs + (size_t)h * D + d] = acc[e];
    }
  }
}


// ---------------------------------------------------------------- tensor-core kernels (bf16 WMMA, f32 accumulation)
namespace wm = nvcuda::wmma;
using bf16 = __nv_bfloat16;
constexpr int TB = 64;        // query and key rows per tile
constexpr int TNT = 128;      // 4 warps, each owning 16 rows of the tile
constexpr int LDP = TB + 8;   // bf16 (64-column) tiles: P, dS
constexpr int LDS = TB + 4;   // f32 (64-column) tiles: S, dP
template <int DM> __host__ __device__ constexpr int ldh() { return DM + 8; }   // bf16 (DM-column) tiles: Q, K, V, dout
template <int DM> __host__ __device__ constexpr int ldo() { return DM + 4; }   // f32 (DM-column) tile: the forward's output
using FragA = wm::fragment<wm::matrix_a, 16, 16, 16, bf16, wm::row_major>;
using FragAt = wm::fragment<wm::matrix_a, 16, 16, 16, bf16, wm::col_major>;
using FragB = wm::fragment<wm::matrix_b, 16, 16, 16, bf16, wm::row_major>;
using FragBt = wm::fragment<wm::matrix_b, 16, 16, 16, bf16, wm::col_major>;
using FragC = wm::fragment<wm::accumulator, 16, 16, 16, float>;

// Rows [row0, row0 + nrows) of a (rows, heads * D) matrix's head block at column `col` into a (TB, ldh) bf16 tile,
// times `mul`; columns >= D and rows past nrows are zero. Four columns per thread and load when the source is
// 16-byte aligned (D, the row stride and the column are multiples of 16 here, so only the base pointer decides;
// the run state packs (T) arrays between its matrices, so it is not always), else one.
template <int DM>
__device__ __forceinline__ void load_bf16(bf16* dst, const float* src, size_t row_stride, int row0, int nrows, int col,
                                          int D, float mul) {
  if ((reinterpret_cast<uintptr_t>(src) & 15) != 0) {
    for (int idx = threadIdx.x; idx < TB * DM; idx += TNT) {
      const int i = idx / DM, c = idx % DM;
      float v = 0.0f;
      if (i < nrows && c < D) v = src[(size_t)(row0 + i) * row_stride + col + c] * mul;
      dst[i * ldh<DM>() + c] = __float2bfloat16(v);
    }
    return;
  }
  for (int idx = threadIdx.x; idx < TB * DM / 4; idx += TNT) {
    const int i = idx / (DM / 4), c = (idx % (DM / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < nrows && c < D) v = *reinterpret_cast<const float4*>(src + (size_t)(row0 + i) * row_stride + col + c);
    __nv_bfloat162* d2 = reinterpret_cast<__nv_bfloat162*>(dst + i * ldh<DM>() + c);
    d2[0] = __floats2bfloat162_rn(v.x * mul, v.y * mul);
    d2[1] = __floats2bfloat162_rn(v.z * mul, v.w * mul);
  }
}

// out (16, 64) f32 at S = A (16 rows of a, DM) . B^T, B's rows the 64 rows of b: both bf16 (TB, ldh) tiles.
template <int DM>
__device__ __forceinline__ void rows_times_rows_t(float* out, const bf16* a, const bf16* b) {
  FragC acc[TB / 16];
#pragma unroll
  for (int n = 0; n < TB / 16; ++n) wm::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int kk = 0; kk < DM / 16; ++kk) {
    FragA fa;
    wm::load_matrix_sync(fa, a + kk * 16, ldh<DM>());
#pragma unroll
    for (int n = 0; n < TB / 16; ++n) {
      FragBt fb;
      wm::load_matrix_sync(fb, b + n * 16 * ldh<DM>() + kk * 16, ldh<DM>());
      wm::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < TB / 16; ++n) wm::store_matrix_sync(out + n * 16, acc[n], LDS, wm::mem_row_major);
}

template <int DM>
constexpr size_t fwd_tc_smem() {
  return sizeof(bf16) * (3 * TB * ldh<DM>() + TB * LDP) + sizeof(float) * (TB * LDS + TB * ldo<DM>() + 3 * TB);
}

template <int DM>
__global__ void __launch_bounds__(TNT) attn_fwd_tc(float* __restrict__ out, float* __restrict__ lse,
                                                  const float* __restrict__ q, const DevSeg* __restrict__ segs,
                                                  const FwdTile* __restrict__ tiles, int H, int Hkv, int D, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);        // (TB, ldh) pre-scaled by 1/sqrt(D)
  bf16* Ks = Qs + TB * ldh<DM>();                  // (TB, ldh)
  bf16* Vs = Ks + TB * ldh<DM>();                  // (TB, ldh)
  bf16* Ps = Vs + TB * ldh<DM>();                  // (TB, LDP) probabilities of the current key tile
  float* Ss = reinterpret_cast<float*>(Ps + TB * LDP);  // (TB, LDS) scores
  float* Os = Ss + TB * LDS;                       // (TB, ldo) unnormalised output
  float* rm = Os + TB * ldo<DM>();                 // (TB) running max
  float* rl = rm + TB;                             // (TB) running sum
  float* ra = rl + TB;                             // (TB) this tile's rescale factor
  const FwdTile tile = tiles[blockIdx.x];
  const DevSeg sg = segs[tile.seg];
  const int h = blockIdx.y, hk = h / (H / Hkv);
  const int nqt = min(TB, sg.nq - tile.i0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, w0 = warp * 16;
  const size_t qs = (size_t)H * D, kvs = (size_t)Hkv * D;
  load_bf16<DM>(Qs, q, qs, sg.q0 + tile.i0, nqt, h * D, D, scale);
  for (int i = threadIdx.x; i < TB * ldo<DM>(); i += TNT) Os[i] = 0.0f;
  for (int i = threadIdx.x; i < TB; i += TNT) { rm[i] = -INFINITY; rl[i] = 0.0f; }
  const int last_key = sg.npast + tile.i0 + nqt - 1;  // the tile's last query sees keys 0 .. last_key
  const int r = w0 + (lane >> 1), c0 = (lane & 1) * 32;  // softmax: two lanes per row, 32 columns each
  const int my_last = sg.npast + tile.i0 + r;
  for (int j0 = 0; j0 <= last_key; j0 += TB) {
    __syncthreads();  // the previous tile's Ks/Vs are no longer read
    const int nk = min(TB, last_key + 1 - j0);
    load_bf16<DM>(Ks, sg.k, kvs, j0, nk, hk * D, D, 1.0f);
    load_bf16<DM>(Vs, sg.v, kvs, j0, nk, hk * D, D, 1.0f);
    __syncthreads();
    rows_times_rows_t<DM>(Ss + w0 * LDS, Qs + w0 * ldh<DM>(), Ks);
    __syncwarp();
    float tmax = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      const int j = c0 + c;
      const bool ok = r < nqt && j < nk && j0 + j <= my_last;  // causal mask, rows and keys past the ends
      const float sv = ok ? Ss[r * LDS + j] : -INFINITY;
      Ss[r * LDS + j] = sv;
      tmax = fmaxf(tmax, sv);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float mold = rm[r], mnew = fmaxf(mold, tmax);
    // A row with no visible key yet (only rows past the segment's end) keeps m = -inf: guard exp(-inf + inf).
    const float alpha = mnew == -INFINITY ? 1.0f : expf(mold - mnew);
    float psum = 0.0f;
    for (int c = 0; c < 32; ++c) {
      const int j = c0 + c;
      const float pv = mnew == -INFINITY ? 0.0f : expf(Ss[r * LDS + j] - mnew);
      Ps[r * LDP + j] = __float2bfloat16(pv);
      psum += pv;
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    __syncwarp();  // both lanes of a row have read rm[r] before it changes
    if ((lane & 1) == 0) {
      rl[r] = rl[r] * alpha + psum;
      rm[r] = mnew;
      ra[r] = alpha;
    }
    __syncwarp();
    for (int i = lane; i < 16 * DM; i += 32) {
      const int rr = w0 + i / DM, c = i % DM;
      Os[rr * ldo<DM>() + c] *= ra[rr];
    }
    __syncwarp();
#pragma unroll
    for (int n = 0; n < DM / 16; ++n) {
      FragC o;
      wm::load_matrix_sync(o, Os + w0 * ldo<DM>() + n * 16, ldo<DM>(), wm::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < TB / 16; ++kk) {
        FragA fp;
        FragB fv;
        wm::load_matrix_sync(fp, Ps + w0 * LDP + kk * 16, LDP);
        wm::load_matrix_sync(fv, Vs + kk * 16 * ldh<DM>() + n * 16, ldh<DM>());
        wm::mma_sync(o, fp, fv, o);
      }
      wm::store_matrix_sync(Os + w0 * ldo<DM>() + n * 16, o, ldo<DM>(), wm::mem_row_major);
    }
  }
  __syncwarp();
  for (int i = lane; i < 16 * DM; i += 32) {
    const int rr = w0 + i / DM, c = i % DM;
    if (rr < nqt && c < D) out[((size_t)sg.q0 + tile.i0 + rr) * qs + (size_t)h * D + c] = Os[rr * ldo<DM>() + c] / rl[rr];
  }
  if (lse && lane < 16 && w0 + lane < nqt)
    lse[((size_t)sg.q0 + tile.i0 + w0 + lane) * H + h] = rm[w0 + lane] + logf(rl[w0 + lane]);
}

// Writes a warp's (16, DM) accumulators to rows [row0, row0 + 16) of a (rows, heads * D) matrix's head block at
// column col (rows past nrows and columns past D skipped), through a 16x16 f32 scratch of its own.
template <int DM>
__device__ __forceinline__ void store_rows(float* dst, size_t row_stride, int row0, int nrows, int col, int D,
                                           FragC* acc, float* scratch) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int n = 0; n < DM / 16; ++n) {
    wm::store_matrix_sync(scratch, acc[n], 16, wm::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 256; i += 32) {
      const int rr = i / 16, c = n * 16 + i % 16;
      if (rr < nrows && c < D) dst[(size_t)(row0 + rr) * row_stride + col + c] = scratch[i];
    }
    __syncwarp();
  }
}

template <int DM>
constexpr size_t dkdv_tc_smem() {
  return sizeof(bf16) * (4 * TB * ldh<DM>() + 2 * TB * LDP) + sizeof(float) * (2 * TB * LDS + 2 * TB);
}

// One block per (key tile of a sequence, kv head): dK and dV of the tile's 64 keys, over the query tiles from the
// key tile's own first row on (causal) and the group's query heads. Warp w owns keys 16w .. 16w + 15 (dK, dV in
// registers); P and dS of a (query tile x key tile) block are built by rows (warp w: queries 16w ..).
template <int DM>
__global__ void __launch_bounds__(TNT) attn_bwd_dkdv_tc(float* __restrict__ dk, float* __restrict__ dv,
                                                       const float* __restrict__ dout, const float* __restrict__ q,
                                                       const float* __restrict__ k, const float* __restrict__ v,
                                                       const float* __restrict__ lse, const float* __restrict__ delta,
                                                       const SeqTile* __restrict__ tiles, int H, int Hkv, int D,
                                                       float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);  // (TB, ldh) this block's keys
  bf16* Vs = Ks + TB * ldh<DM>();            // (TB, ldh)
  bf16* Qs = Vs + TB * ldh<DM>();            // (TB, ldh) the query tile (unscaled)
  bf16* Gs = Qs + TB * ldh<DM>();            // (TB, ldh) dout of the query tile
  bf16* Ps = Gs + TB * ldh<DM>();            // (TB queries, LDP) probabilities
  bf16* Ds = Ps + TB * LDP;                  // (TB queries, LDP) dS (scaled)
  float* Ss = reinterpret_cast<float*>(Ds + TB * LDP);  // (TB, LDS) scores
  float* Ts = Ss + TB * LDS;                 // (TB, LDS) dP = dout V^T
  float* Ls = Ts + TB * LDS;                 // (TB) lse
  float* Dl = Ls + TB;                       // (TB) delta
  const SeqTile tile = tiles[blockIdx.x];
  const int hk = blockIdx.y, group = H / Hkv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, w0 = warp * 16;
  const size_t qs = (size_t)H * D, kvs = (size_t)Hkv * D;
  const int nkt = min(TB, tile.n - tile.i0);
  load_bf16<DM>(Ks, k, kvs, tile.t0 + tile.i0, nkt, hk * D, D, 1.0f);
  load_bf16<DM>(Vs, v, kvs, tile.t0 + tile.i0, nkt, hk * D, D, 1.0f);
  FragC ak[DM / 16], av[DM / 16];
#pragma unroll
  for (int n = 0; n < DM / 16; ++n) { wm::fill_fragment(ak[n], 0.0f); wm::fill_fragment(av[n], 0.0f); }
  const int r = w0 + (lane >> 1), c0 = (lane & 1) * 32;  // elementwise: two lanes per query row
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    for (int q0 = tile.i0; q0 < tile.n; q0 += TB) {
      const int nq = min(TB, tile.n - q0);
      __syncthreads();  // the previous query tile is no longer read
      load_bf16<DM>(Qs, q, qs, tile.t0 + q0, nq, h * D, D, 1.0f);
      load_bf16<DM>(Gs, dout, qs, tile.t0 + q0, nq, h * D, D, 1.0f);
      for (int i = threadIdx.x; i < TB; i += TNT) {
        Ls[i] = i < nq ? lse[(size_t)(tile.t0 + q0 + i) * H + h] : 0.0f;
        Dl[i] = i < nq ? delta[(size_t)(tile.t0 + q0 + i) * H + h] : 0.0f;
      }
      __syncthreads();
      rows_times_rows_t<DM>(Ss + w0 * LDS, Qs + w0 * ldh<DM>(), Ks);
      rows_times_rows_t<DM>(Ts + w0 * LDS, Gs + w0 * ldh<DM>(), Vs);
      __syncwarp();
      for (int c = 0; c < 32; ++c) {
        const int j = c0 + c;
        const bool ok = r < nq && j < nkt && tile.i0 + j <= q0 + r;
        const float pv = ok ? expf(Ss[r * LDS + j] * scale - Ls[r]) : 0.0f;
        Ps[r * LDP + j] = __float2bfloat16(pv);
        Ds[r * LDP + j] = __float2bfloat16(pv * (Ts[r * LDS + j] - Dl[r]) * scale);
      }
      __syncthreads();  // dK and dV read every query row of P and dS
#pragma unroll
      for (int kk = 0; kk < TB / 16; ++kk) {
        FragAt fp, fd;  // P^T and dS^T: (keys of this warp) x (16 queries)
        wm::load_matrix_sync(fp, Ps + kk * 16 * LDP + w0, LDP);
        wm::load_matrix_sync(fd, Ds + kk * 16 * LDP + w0, LDP);
#pragma unroll
        for (int n = 0; n < DM / 16; ++n) {
          FragB fg, fq;
          wm::load_matrix_sync(fg, Gs + kk * 16 * ldh<DM>() + n * 16, ldh<DM>());
          wm::load_matrix_sync(fq, Qs + kk * 16 * ldh<DM>() + n * 16, ldh<DM>());
          wm::mma_sync(av[n], fp, fg, av[n]);
          wm::mma_sync(ak[n], fd, fq, ak[n]);
        }
      }
    }
  }
  __syncthreads();  // Ss is reused as scratch below
  float* scratch = Ss + warp * 256;
  store_rows<DM>(dk, kvs, tile.t0 + tile.i0 + w0, nkt - w0, hk * D, D, ak, scratch);
  store_rows<DM>(dv, kvs, tile.t0 + tile.i0 + w0, nkt - w0, hk * D, D, av, scratch);
}

template <int DM>
constexpr size_t dq_tc_smem() {
  return sizeof(bf16) * (4 * TB * ldh<DM>() + TB * LDP) + sizeof(float) * (2 * TB * LDS + 2 * TB);
}

// One block per (query tile, head): dQ of the tile's 64 queries over the key tiles up to the tile's last query.
// Warp w owns queries 16w .. 16w + 15 (dQ in registers, its rows of S, dP and dS).
template <int DM>
__global__ void __launch_bounds__(TNT) attn_bwd_dq_tc(float* __restrict__ dq, const float* __restrict__ dout,
                                                     const float* __restrict__ q, const float* __restrict__ k,
                                                     const float* __restrict__ v, const float* __restrict__ lse,
                                                     const float* __restrict__ delta, const SeqTile* __restrict__ tiles,
                                                     int H, int Hkv, int D, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);  // (TB, ldh)
  bf16* Gs = Qs + TB * ldh<DM>();            // (TB, ldh) dout
  bf16* Ks = Gs + TB * ldh<DM>();            // (TB, ldh)
  bf16* Vs = Ks + TB * ldh<DM>();            // (TB, ldh)
  bf16* Ds = Vs + TB * ldh<DM>();            // (TB, LDP) dS (scaled)
  float* Ss = reinterpret_cast<float*>(Ds + TB * LDP);  // (TB, LDS)
  float* Ts = Ss + TB * LDS;                 // (TB, LDS)
  float* Ls = Ts + TB * LDS;                 // (TB)
  float* Dl = Ls + TB;                       // (TB)
  const SeqTile tile = tiles[blockIdx.x];
  const int h = blockIdx.y, hk = h / (H / Hkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, w0 = warp * 16;
  const size_t qs = (size_t)H * D, kvs = (size_t)Hkv * D;
  const int nqt = min(TB, tile.n - tile.i0);
  load_bf16<DM>(Qs, q, qs, tile.t0 + tile.i0, nqt, h * D, D, 1.0f);
  load_bf16<DM>(Gs, dout, qs, tile.t0 + tile.i0, nqt, h * D, D, 1.0f);
  for (int i = threadIdx.x; i < TB; i += TNT) {
    Ls[i] = i < nqt ? lse[(size_t)(tile.t0 + tile.i0 + i) * H + h] : 0.0f;
    Dl[i] = i < nqt ? delta[(size_t)(tile.t0 + tile.i0 + i) * H + h] : 0.0f;
  }
  FragC acc[DM / 16];
#pragma unroll
  for (int n = 0; n < DM / 16; ++n) wm::fill_fragment(acc[n], 0.0f);
  const int r = w0 + (lane >> 1), c0 = (lane & 1) * 32;
  for (int j0 = 0; j0 < tile.i0 + nqt; j0 += TB) {
    const int nk = min(TB, tile.i0 + nqt - j0);
    __syncthreads();
    load_bf16<DM>(Ks, k, kvs, tile.t0 + j0, nk, hk * D, D, 1.0f);
    load_bf16<DM>(Vs, v, kvs, tile.t0 + j0, nk, hk * D, D, 1.0f);
    __syncthreads();
    rows_times_rows_t<DM>(Ss + w0 * LDS, Qs + w0 * ldh<DM>(), Ks);
    rows_times_rows_t<DM>(Ts + w0 * LDS, Gs + w0 * ldh<DM>(), Vs);
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      const int j = c0 + c;
      const bool ok = r < nqt && j < nk && j0 + j <= tile.i0 + r;
      const float pv = ok ? expf(Ss[r * LDS + j] * scale - Ls[r]) : 0.0f;
      Ds[r * LDP + j] = __float2bfloat16(pv * (Ts[r * LDS + j] - Dl[r]) * scale);
    }
    __syncwarp();
#pragma unroll
    for (int kk = 0; kk < TB / 16; ++kk) {
      FragA fd;
      wm::load_matrix_sync(fd, Ds + w0 * LDP + kk * 16, LDP);
#pragma unroll
      for (int n = 0; n < DM / 16; ++n) {
        FragB fk;
        wm::load_matrix_sync(fk, Ks + kk * 16 * ldh<DM>() + n * 16, ldh<DM>());
        wm::mma_sync(acc[n], fd, fk, acc[n]);
      }
    }
  }
  __syncwarp();
  store_rows<DM>(dq, qs, tile.t0 + tile.i0 + w0, nqt - w0, h * D, D, acc, Ss + w0 * LDS);
}


// ---------------------------------------------------------------- decode: one query against its KV cache
// One block per (segment of a single query, head), 4 warps: warp w takes keys w, w + 4, ...; per key the warp's
// lanes share the dot product (lane owns dims lane, lane + 32, ...) and keep an online softmax and their dims of
// the output; the four warps' states are merged at the end. f32 throughout (agrees with the CPU op to 1e-4).
// The tile kernels would spend a 32- or 64-row tile on this single row.
constexpr int DEC_WARPS = 4;

__global__ void __launch_bounds__(32 * DEC_WARPS) attn_decode_kernel(float* __restrict__ out, float* __restrict__ lse,
                                                                    const float* __restrict__ q,
                                                                    const DevSeg* __restrict__ segs, int H, int Hkv,
                                                                    int D, float scale) {
  __shared__ float wm_[DEC_WARPS], wl_[DEC_WARPS], wacc[DEC_WARPS][128];
  const DevSeg sg = segs[blockIdx.x];
  const int h = blockIdx.y, hk = h / (H / Hkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const size_t kvs = (size_t)Hkv * D;
  const float* qr = q + (size_t)sg.q0 * H * D + (size_t)h * D;
  float qv[4], acc[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < D ? qr[d] * scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int nkeys = sg.npast + 1;  // the query at position npast sees keys 0 .. npast
  for (int j = warp; j < nkeys; j += DEC_WARPS) {
    const float* kr = sg.k + (size_t)j * kvs + (size_t)hk * D;
    const float* vr = sg.v + (size_t)j * kvs + (size_t)hk * D;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = lane + 32 * i;
      if (d < D) s = fmaf(qv[i], kr[d], s);
    }
    s = warp_sum(s);
    const float mnew = fmaxf(m, s), alpha = expf(m - mnew), p = expf(s - mnew);
    l = l * alpha + p;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = lane + 32 * i;
      acc[i] = acc[i] * alpha + (d < D ? p * vr[d] : 0.0f);
    }
    m = mnew;
  }
  if (lane == 0) { wm_[warp] = m; wl_[warp] = l; }
#pragma unroll
  for (int i = 0; i < 4; ++i) wacc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  float M = -INFINITY;
  for (int w = 0; w < DEC_WARPS; ++w) M = fmaxf(M, wm_[w]);
  float L = 0.0f, f[DEC_WARPS];
  for (int w = 0; w < DEC_WARPS; ++w) {
    f[w] = wm_[w] == -INFINITY ? 0.0f : expf(wm_[w] - M);  // a warp that saw no key (fewer keys than warps)
    L += wl_[w] * f[w];
  }
  float* orow = out + (size_t)sg.q0 * H * D + (size_t)h * D;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int d = lane + 32 * i;
    if (d >= D) continue;
    float o = 0.0f;
    for (int w = 0; w < DEC_WARPS; ++w) o += wacc[w][d] * f[w];
    orow[d] = o / L;
  }
  if (lse && lane == 0) lse[(size_t)sg.q0 * H + h] = M + logf(L);
}

// Shared-memory bytes of each kernel for head-dim bucket DM (kept next to the kernels' layouts above).
template <int DM> constexpr size_t fwd_smem() { return sizeof(float) * (BQ * (DM + 1) + BK * (DM + 1) + BK * DM + BQ * (BK + 1)); }
template <int DM> constexpr size_t dkdv_smem() { return sizeof(float) * (4 * 32 * (DM + 1) + 2 * BQ * (BK + 1) + 2 * BQ); }
template <int DM> constexpr size_t dq_smem() { return sizeof(float) * (4 * 32 * (DM + 1) + BQ * (BK + 1)); }

// Raises a kernel's dynamic shared-memory limit above the default 48 KB once.
template <typename K>
void allow_smem(K kernel, size_t bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

int head_bucket(int D) {
  CHECK(D > 0 && D <= 128, "CUDA attention supports head_dim up to 128, got " + std::to_string(D));
  return D <= 32 ? 32 : D <= 64 ? 64 : 128;
}

void check_heads(int H, int Hkv) {
  CHECK(H > 0 && Hkv > 0 && H % Hkv == 0,
        "attention: heads (" + std::to_string(H) + ") must be a multiple of kv heads (" + std::to_string(Hkv) + ")");
}

// Copies host descriptors into the metadata workspace; returns device pointers to each part.
template <typename A, typename B>
void upload(const std::vector<A>& a, const std::vector<B>& b, const A** da, const B** db) {
  const size_t na = a.size() * sizeof(A), off = (na + 255) / 256 * 256, nb = b.size() * sizeof(B);
  auto* base = static_cast<char*>(workspace(WS_ATTN_META, off + nb + 1));
  if (na) CUDA_CHECK(cudaMemcpyAsync(base, a.data(), na, cudaMemcpyHostToDevice, stream()));
  if (nb) CUDA_CHECK(cudaMemcpyAsync(base + off, b.data(), nb, cudaMemcpyHostToDevice, stream()));
  *da = reinterpret_cast<const A*>(base);
  *db = reinterpret_cast<const B*>(base + off);
}

template <int DM>
void launch_fwd(dim3 grid, float* out, float* lse, const float* q, const DevSeg* segs, const FwdTile* tiles, int H,
                int Hkv, int D, float scale) {
  static bool init = (allow_smem(attn_fwd_kernel<DM>, fwd_smem<DM>()), true);
  (void)init;
  attn_fwd_kernel<DM><<<grid, NT, fwd_smem<DM>(), stream()>>>(out, lse, q, segs, tiles, H, Hkv, D, scale);
  CUDA_LAUNCHED("attention_forward");
}

template <int DM>
void launch_bwd(unsigned ntiles, float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                const float* v, const float* lse, const float* delta, const SeqTile* tiles, int H, int Hkv, int D,
                float scale) {
  static bool init = (allow_smem(attn_bwd_dkdv_kernel<DM>, dkdv_smem<DM>()),
                      allow_smem(attn_bwd_dq_kernel<DM>, dq_smem<DM>()), true);
  (void)init;
  attn_bwd_dkdv_kernel<DM><<<dim3(ntiles, Hkv), NT, dkdv_smem<DM>(), stream()>>>(dk, dv, dout, q, k, v, lse, delta,
                                                                                 tiles, H, Hkv, D, scale);
  CUDA_LAUNCHED("attention_backward dk/dv");
  attn_bwd_dq_kernel<DM><<<dim3(ntiles, H), NT, dq_smem<DM>(), stream()>>>(dq, dout, q, k, v, lse, delta, tiles, H,
                                                                           Hkv, D, scale);
  CUDA_LAUNCHED("attention_backward dq");
}

template <int DM>
void launch_fwd_tc(dim3 grid, float* out, float* lse, const float* q, const DevSeg* segs, const FwdTile* tiles, int H,
                   int Hkv, int D, float scale) {
  static bool init = (allow_smem(attn_fwd_tc<DM>, fwd_tc_smem<DM>()), true);
  (void)init;
  attn_fwd_tc<DM><<<grid, TNT, fwd_tc_smem<DM>(), stream()>>>(out, lse, q, segs, tiles, H, Hkv, D, scale);
  CUDA_LAUNCHED("attention_forward (tensor cores)");
}

template <int DM>
void launch_bwd_tc(unsigned ntiles, float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                   const float* v, const float* lse, const float* delta, const SeqTile* tiles, int H, int Hkv, int D,
                   float scale) {
  static bool init = (allow_smem(attn_bwd_dkdv_tc<DM>, dkdv_tc_smem<DM>()),
                      allow_smem(attn_bwd_dq_tc<DM>, dq_tc_smem<DM>()), true);
  (void)init;
  attn_bwd_dkdv_tc<DM><<<dim3(ntiles, Hkv), TNT, dkdv_tc_smem<DM>(), stream()>>>(dk, dv, dout, q, k, v, lse, delta,
                                                                                 tiles, H, Hkv, D, scale);
  CUDA_LAUNCHED("attention_backward dk/dv (tensor cores)");
  attn_bwd_dq_tc<DM><<<dim3(ntiles, H), TNT, dq_tc_smem<DM>(), stream()>>>(dq, dout, q, k, v, lse, delta, tiles, H,
                                                                           Hkv, D, scale);
  CUDA_LAUNCHED("attention_backward dq (tensor cores)");
}

// -1: not chosen yet (MCPRL_CUDA_ATTENTION decides at the first call), 0: f32 kernels, 1: tensor cores.
int g_tensor_cores = -1;

// The tensor-core kernels when head_dim is a multiple of 16 (up to 128) and they are not switched off.
bool use_tensor_cores(int D) {
  if (g_tensor_cores < 0) {
    const char* e = std::getenv("MCPRL_CUDA_ATTENTION");
    g_tensor_cores = e && std::strcmp(e, "f32") == 0 ? 0 : 1;
  }
  return g_tensor_cores == 1 && D % 16 == 0 && D <= 128;
}

}  // namespace

void attention_set_tensor_cores(bool on) { g_tensor_cores = on ? 1 : 0; }

void attention_forward(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H, int Hkv,
                       int D) {
  check_heads(H, Hkv);
  const int dm = head_bucket(D);
  const bool tc = use_tensor_cores(D);
  const int tile_rows = tc ? TB : BQ;
  // Segments of one query (decode steps) go to the decode kernel, the others to the tile kernels.
  std::vector<DevSeg> ds, single;
  std::vector<FwdTile> tiles;
  for (int s = 0; s < nseg; ++s) {
    const AttnSegment& a = segs[s];
    CHECK(a.nq >= 0 && a.npast >= 0, "attention: negative segment size");
    if (a.nq == 1) {
      single.push_back({a.q0, a.nq, a.npast, a.k, a.v});
      continue;
    }
    ds.push_back({a.q0, a.nq, a.npast, a.k, a.v});
    for (int i0 = 0; i0 < a.nq; i0 += tile_rows) tiles.push_back({(int)ds.size() - 1, i0});
  }
  const float scale = 1.0f / std::sqrt((float)D);
  if (!single.empty()) {
    const std::vector<int> none;
    const int* unused;
    const DevSeg* dsingle;
    upload(single, none, &dsingle, &unused);
    attn_decode_kernel<<<dim3((unsigned)single.size(), (unsigned)H), 32 * DEC_WARPS, 0, stream()>>>(
        out, lse, q, dsingle, H, Hkv, D, scale);
    CUDA_LAUNCHED("attention_forward (decode)");
  }
  if (tiles.empty()) return;
  const DevSeg* dsegs;
  const FwdTile* dtiles;
  upload(ds, tiles, &dsegs, &dtiles);
  const dim3 grid((unsigned)tiles.size(), (unsigned)H);
  if (tc && dm == 64) launch_fwd_tc<64>(grid, out, lse, q, dsegs, dtiles, H, Hkv, D, scale);
  else if (tc) launch_fwd_tc<128>(grid, out, lse, q, dsegs, dtiles, H, Hkv, D, scale);
  else if (dm == 32) launch_fwd<32>(grid, out, lse, q, dsegs, dtiles, H, Hkv, D, scale);
  else if (dm == 64) launch_fwd<64>(grid, out, lse, q, dsegs, dtiles, H, Hkv, D, scale);
  else launch_fwd<128>(grid, out, lse, q, dsegs, dtiles, H, Hkv, D, scale);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* cu_seqlens, int nseq, int H,
                        int Hkv, int D) {
  check_heads(H, Hkv);
  const int dm = head_bucket(D);
  const bool tc = use_tensor_cores(D);
  const int tile_rows = tc ? TB : BQ;
  std::vector<SeqTile> tiles;
  for (int s = 0; s < nseq; ++s) {
    const int t0 = cu_seqlens[s], n = cu_seqlens[s + 1] - t0;
    CHECK(n >= 0, "attention_backward: cu_seqlens must not decrease");
    for (int i0 = 0; i0 < n; i0 += tile_rows) tiles.push_back({t0, n, i0});
  }
  if (tiles.empty()) return;
  const long T = cu_seqlens[nseq];
  auto* delta = static_cast<float*>(workspace(WS_ATTN_DELTA, (size_t)T * H * sizeof(float)));
  const long rows = T * H;
  attn_delta_kernel<<<(unsigned)cdiv(rows, 8), 256, 0, stream()>>>(delta, dout, out, rows, D);
  CUDA_LAUNCHED("attention_backward delta");
  const std::vector<int> none;
  const int* unused;
  const SeqTile* dtiles;
  upload(none, tiles, &unused, &dtiles);
  const float scale = 1.0f / std::sqrt((float)D);
  const unsigned nt = (unsigned)tiles.size();
  if (tc && dm == 64) launch_bwd_tc<64>(nt, dq, dk, dv, dout, q, k, v, lse, delta, dtiles, H, Hkv, D, scale);
  else if (tc) launch_bwd_tc<128>(nt, dq, dk, dv, dout, q, k, v, lse, delta, dtiles, H, Hkv, D, scale);
  else if (dm == 32) launch_bwd<32>(nt, dq, dk, dv, dout, q, k, v, lse, delta, dtiles, H, Hkv, D, scale);
  else if (dm == 64) launch_bwd<64>(nt, dq, dk, dv, dout, q, k, v, lse, delta, dtiles, H, Hkv, D, scale);
  else launch_bwd<128>(nt, dq, dk, dv, dout, q, k, v, lse, delta, dtiles, H, Hkv, D, scale);
}

}  // namespace cuda
}  // namespace mcprl
