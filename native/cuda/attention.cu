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
// Arithmetic is f32 on the CUDA cores (no tensor cores yet): correct first; a bf16 mma version is later work.
// Backward (packed sequences only, npast = 0) recomputes the probabilities from lse, as the CPU op does, in two
// kernels without atomics (deterministic): one per key tile for dk/dv looping over the query tiles and the
// group's query heads, one per query tile for dq looping over the key tiles.
#include <algorithm>
#include <cmath>
#include <vector>

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

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H, int Hkv,
                       int D) {
  check_heads(H, Hkv);
  const int dm = head_bucket(D);
  std::vector<DevSeg> ds;
  std::vector<FwdTile> tiles;
  for (int s = 0; s < nseg; ++s) {
    const AttnSegment& a = segs[s];
    CHECK(a.nq >= 0 && a.npast >= 0, "attention: negative segment size");
    ds.push_back({a.q0, a.nq, a.npast, a.k, a.v});
    for (int i0 = 0; i0 < a.nq; i0 += BQ) tiles.push_back({s, i0});
  }
  if (tiles.empty()) return;
  const DevSeg* dsegs;
  const FwdTile* dtiles;
  upload(ds, tiles, &dsegs, &dtiles);
  const dim3 grid((unsigned)tiles.size(), (unsigned)H);
  const float scale = 1.0f / std::sqrt((float)D);
  if (dm == 32) launch_fwd<32>(grid, out, lse, q, dsegs, dtiles, H, Hkv, D, scale);
  else if (dm == 64) launch_fwd<64>(grid, out, lse, q, dsegs, dtiles, H, Hkv, D, scale);
  else launch_fwd<128>(grid, out, lse, q, dsegs, dtiles, H, Hkv, D, scale);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* cu_seqlens, int nseq, int H,
                        int Hkv, int D) {
  check_heads(H, Hkv);
  const int dm = head_bucket(D);
  std::vector<SeqTile> tiles;
  for (int s = 0; s < nseq; ++s) {
    const int t0 = cu_seqlens[s], n = cu_seqlens[s + 1] - t0;
    CHECK(n >= 0, "attention_backward: cu_seqlens must not decrease");
    for (int i0 = 0; i0 < n; i0 += BQ) tiles.push_back({t0, n, i0});
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
  if (dm == 32) launch_bwd<32>(nt, dq, dk, dv, dout, q, k, v, lse, delta, dtiles, H, Hkv, D, scale);
  else if (dm == 64) launch_bwd<64>(nt, dq, dk, dv, dout, q, k, v, lse, delta, dtiles, H, Hkv, D, scale);
  else launch_bwd<128>(nt, dq, dk, dv, dout, q, k, v, lse, delta, dtiles, H, Hkv, D, scale);
}

}  // namespace cuda
}  // namespace mcprl
