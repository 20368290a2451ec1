// The LM head + log-softmax (see lm_head.h).
#include "lm_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../core/common.h"
#include "../kernels/fastmath.h"
#include "../kernels/gemm.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mcprl {

void logits_forward(float* z, const float* h, WeightRef W, int N, int C, int V) {
  gemm_w(true, N, V, C, 1.0f, h, C, W, C, 0.0f, z, V);
}

namespace {

// One row's log-sum-exp so far, over the vocabulary tiles seen: sums relative to the running max mx.
struct RowState {
  double sum, wsum;  // Σ e, Σ e (z − mx)
  float mx, zt;      // running max of the tempered, allowed logits; the target's tempered logit
  float resc;        // this tile's rescale factor for the row of g (1 / Σ e once the row is done)
};

// Row n's tile of logits z (columns [v0, v0 + vc) of the vocabulary) into the row's state: tempered, masked, the
// running max moved to the tile's, z overwritten with e = exp(z − mx) (0 outside the allowed set), the sums
// rescaled and the tile's added. Within the tile, float partial sums over blocks of 1024 columns, added in double.
void tile_row(RowState& st, float* z, int v0, int vc, int target, float ts, const uint32_t* allow) {
  auto allowed = [allow](int v) { return (bool)((allow[v >> 5] >> (v & 31)) & 1u); };
  // Passes over the row's logits are what this op adds to its two GEMMs, so the temperature rides on the max pass,
  // in 8 lanes (GCC leaves a max reduction scalar: one dependent vmaxss per logit); a max is exact, so the lanes
  // find the serial pass's value. Allowed sets: 8 bits of the set per 8 logits where they sit in one word.
  typedef float f32x8u __attribute__((vector_size(32), aligned(4)));
  typedef int32_t i32x8 __attribute__((vector_size(32)));
  const i32x8 lane_bit = {1, 2, 4, 8, 16, 32, 64, 128};
  const f32x8 none = f32x8{} - INFINITY;
  f32x8 m8 = none;
  int c = 0;
  if ((v0 & 7) == 0 || !allow)
    for (; c + 8 <= vc; c += 8) {
      f32x8 x = *(const f32x8u*)(z + c);
      if (ts != 1.0f) *(f32x8u*)(z + c) = x = x * ts;
      if (allow) {
        const int v = v0 + c;
        const int32_t bits = (int32_t)((allow[v >> 5] >> (v & 31)) & 0xffu);
        x = ((i32x8{} + bits) & lane_bit) != 0 ? x : none;
      }
      m8 = x > m8 ? x : m8;
    }
  float mx = -INFINITY;
  for (int l = 0; l < 8; ++l) mx = std::max(mx, m8[l]);
  for (; c < vc; ++c) {
    if (ts != 1.0f) z[c] *= ts;
    if (!allow || allowed(v0 + c)) mx = std::max(mx, z[c]);
  }
  if (target >= v0 && target < v0 + vc) st.zt = z[target - v0];
  const bool first = st.mx == -INFINITY;  // nothing allowed seen before: the old sums are 0
  mx = std::max(mx, st.mx);
  if (mx == -INFINITY) {  // nothing allowed yet: the tile contributes nothing
    for (int c = 0; c < vc; ++c) z[c] = 0.0f;
    st.resc = 1.0f;
    return;
  }
  double sum = 0.0, wsum = 0.0;
  for (int c0 = 0; c0 < vc; c0 += 1024) {
    const int c1 = std::min(vc, c0 + 1024);
    float s = 0.0f, ws = 0.0f;
    if (allow) {
      // Tokens outside the allowed set get probability 0.
      for (int c = c0; c < c1; ++c) {
        if (!allowed(v0 + c)) { z[c] = 0.0f; continue; }
        float d = z[c] - mx;
        float e = exp_nonpos(d);
        s += e;
        ws += e * d;
        z[c] = e;
      }
    } else {
      // 8 lanes at a time in vector types (exp_nonpos8): GCC leaves the scalar form unvectorised.
      typedef float f32x8u __attribute__((vector_size(32), aligned(4)));
      f32x8 s8 = {}, ws8 = {};
      int c = c0;
      for (; c + 8 <= c1; c += 8) {
        const f32x8 d = *(const f32x8u*)(z + c) - mx;
        const f32x8 e = exp_nonpos8(d);
        s8 += e;
        ws8 += e * d;
        *(f32x8u*)(z + c) = e;
      }
      for (int l = 0; l < 8; ++l) {
        s += s8[l];
        ws += ws8[l];
      }
      for (; c < c1; ++c) {
        const float d = z[c] - mx;
        const float e = exp_nonpos(d);
        s += e;
        ws += e * d;
        z[c] = e;
      }
    }
    sum += s;
    wsum += ws;
  }
  if (first) {
    st.sum = sum;
    st.wsum = wsum;
    st.resc = 0.0f;
  } else {
    // Σ e (z − mx) relative to the new max: f (Σ e (z − old) + (old − new) Σ e).
    const double f = std::exp((double)st.mx - (double)mx);
    st.wsum = f * (st.wsum + st.sum * ((double)st.mx - (double)mx)) + wsum;
    st.sum = f * st.sum + sum;
    st.resc = (float)f;
  }
  st.mx = mx;
}

}  // namespace

// ---- The fused path (lm_head.h: lm_head_fused_applies) ----
#if defined(__x86_64__) && defined(__GNUC__)
namespace {

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

// Register tile of the fused path: acc (MR x 16 NZ) = sum over k < K of a(i, k) b(k, j), a(i, k) = a[i ai + k ak]
// broadcast, b(k, j) = b[k bk + j] in NZ 16-lane vectors (64-byte aligned); then c (MR rows of ld ldc) = acc, or
// += acc. One fused multiply-add chain per element, in order of k.
template <int MR, int NZ, bool ADD>
__attribute__((target("avx512f"))) inline void fused_tile(int K, const float* __restrict a, long ai, long ak,
                                                           const float* __restrict b, long bk, float* c, long ldc) {
  v16 acc[MR][NZ] = {};
  // Four steps of k per loop iteration: the loop's own instructions otherwise cost a tenth of the rate (measured).
#pragma GCC unroll 4
  for (int k = 0; k < K; ++k) {
    v16 bv[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) bv[z] = *(const v16*)(b + (long)k * bk + 16 * z);
    const float* ap = a + (long)k * ak;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const float s = ap[i * ai];
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) acc[i][z] += s * bv[z];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) {
      v16* o = (v16*)(c + i * ldc + 16 * z);
      *o = ADD ? *o + acc[i][z] : acc[i][z];
    }
}

// One register tile over a panel of w = 32 or 16 columns (b and c with row stride w).
template <bool ADD>
__attribute__((target("avx512f"))) inline void panel_tile(int K, const float* a, long ai, long ak, const float* b, int w,
                                                           float* c) {
  if (w == 32) fused_tile<kLmHeadFusedRows, 2, ADD>(K, a, ai, ak, b, 32, c, 32);
  else fused_tile<kLmHeadFusedRows, 1, ADD>(K, a, ai, ak, b, 16, c, 16);
}

// exp_nonpos on 16 lanes (the same Cephes arithmetic as fastmath.h's exp_range, the clamp at -87 a lane select).
// Written out here rather than instantiating exp_range for 16 lanes: that template is compiled without AVX-512, and
// GCC then warns (-Wpsabi) of 64-byte vectors passed under another ABI, even when every call is inlined.
__attribute__((target("avx512f"))) inline v16 exp_nonpos16(v16 x) {
  const v16 lo = v16{} - 87.0f;
  x = x < lo ? lo : x;
  const v16 t = x * 1.44269504088896341f;
  const v16 k = (t + 12582912.0f) - 12582912.0f;
  const v16 r = x - k * 0.693359375f + k * 2.12194440e-4f;
  v16 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * (v16)((__builtin_convertvector(k, i32x16) + 127) << 23);
}

// One thread's buffers, kept and grown like the GEMM's packing buffers.
struct FusedBuffers {
  FloatBuffer hp, z, gt, wide, tail;
  void reserve(FloatBuffer& b, size_t n) {
    if (b.size < n) b.allocate(n);
  }
};

// Rows [0, m) of one block (m <= token_block): h (m, C), targets, inv_temp (or null) and outputs offset to the block.
// The block's rows go in panels of 32 (the last of 16 when m rounds up to an odd number of 16s): panel p holds rows
// [32 p, 32 p + w) and keeps its own contiguous slices of h^T (C, w), of the tile's logits (vt, w) and of g^T (C, w),
// so that each register tile reads its panel in one stream. (With rows of the whole block side by side, a panel's
// rows sat 1 KiB apart for C = 256 and mapped to a few L1 sets only: 3.5 % slower, measured.)
__attribute__((target("avx512f"))) void fused_block(float* logp, float* lse, float* entropy, float* g,
                                                     const float* h, WeightRef W, const int32_t* targets, int m,
                                                     int C, int V, const float* inv_temp, int vt, FusedBuffers& buf) {
  constexpr int R = kLmHeadFusedRows;
  const int mp = (m + 15) & ~15, panels = (mp + 31) / 32;
  const int vtp = (vt + R - 1) / R * R;
  auto width = [mp](int p) { return std::min(32, mp - 32 * p); };
  buf.reserve(buf.hp, (size_t)C * mp);
  buf.reserve(buf.z, (size_t)vtp * mp);
  buf.reserve(buf.tail, (size_t)R * C);
  if (!W.is_f32()) buf.reserve(buf.wide, (size_t)vt * C);
  float* const hp = buf.hp.data;  // panel p at 32 p C
  float* const z = buf.z.data;    // panel p at 32 p vtp
  float* gt = nullptr;            // panel p at 32 p C
  if (g) {
    buf.reserve(buf.gt, (size_t)C * mp);
    gt = buf.gt.data;
    std::memset(gt, 0, sizeof(float) * C * mp);
  }
  // h^T per panel, zero columns past m.
  for (int p = 0; p < panels; ++p) {
    const int w = width(p);
    float* dst = hp + (size_t)32 * p * C;
    for (int c = 0; c < C; ++c)
      for (int l = 0; l < w; ++l) {
        const int t = 32 * p + l;
        dst[(size_t)c * w + l] = t < m ? h[(size_t)t * C + c] : 0.0f;
      }
  }
  std::vector<float> mx(mp, -INFINITY), zt(mp, 0.0f), ts(mp, 1.0f);
  std::vector<double> sum(mp, 0.0), wsum(mp, 0.0);
  if (inv_temp) std::copy(inv_temp, inv_temp + m, ts.begin());
  for (int v0 = 0; v0 < V; v0 += vt) {
    const int vc = std::min(vt, V - v0);
    const float* Wt;
    if (W.is_f32()) {
      Wt = W.f32() + (size_t)v0 * C;
    } else {
      widen(buf.wide.data, W, (size_t)v0 * C, (size_t)vc * C);
      Wt = buf.wide.data;
    }
    for (int p = 0; p < panels; ++p) {
      const int w = width(p);
      float* zp = z + (size_t)32 * p * vtp;
      // z^T (vc, w) = Wt h^T: R vocabulary rows per register tile, the last ones from a zero-padded copy.
      for (int vb = 0; vb < vc; vb += R) {
        const float* a = Wt + (size_t)vb * C;
        if (vb + R > vc) {
          std::memset(buf.tail.data, 0, sizeof(float) * R * C);
          std::memcpy(buf.tail.data, a, sizeof(float) * (vc - vb) * C);
          a = buf.tail.data;
        }
        panel_tile<false>(C, a, C, 1, hp + (size_t)32 * p * C, w, zp + (size_t)vb * w);
      }
      // Per 16 rows (lanes): tempered, the tile's max, the running max moved, e = exp(z - max) in place.
      for (int half = 0; half < w; half += 16) {
        const int tb = 32 * p + half;
        float* zb = zp + half;
        const v16 t16 = *(const v16u*)&ts[tb];
        v16 m16 = v16{} - INFINITY;
        for (int v = 0; v < vc; ++v) {
          v16* q = (v16*)(zb + (size_t)v * w);
          if (inv_temp) *q *= t16;
          m16 = *q > m16 ? *q : m16;
        }
        for (int l = 0; l < 16 && tb + l < m; ++l)  // the target's tempered logit
          if (targets[tb + l] >= v0 && targets[tb + l] < v0 + vc) zt[tb + l] = zb[(size_t)(targets[tb + l] - v0) * w + l];
        v16 nm = *(const v16u*)&mx[tb];
        nm = m16 > nm ? m16 : nm;
        v16 s16 = {}, w16 = {};
        for (int v = 0; v < vc; ++v) {
          v16* q = (v16*)(zb + (size_t)v * w);
          const v16 d = *q - nm;
          const v16 e = exp_nonpos16(d);
          s16 += e;
          if (entropy) w16 += e * d;
          *q = e;
        }
        v16 f16 = v16{} + 1.0f;
        bool rescale = false;
        for (int l = 0; l < 16 && tb + l < m; ++l) {
          const int t = tb + l;
          if (mx[t] == -INFINITY) {
            sum[t] = s16[l];
            wsum[t] = w16[l];
          } else {
            const double d = (double)mx[t] - (double)nm[l];
            const double f = std::exp(d);
            wsum[t] = f * (wsum[t] + sum[t] * d) + w16[l];
            sum[t] = f * sum[t] + s16[l];
            f16[l] = (float)f;
            rescale = rescale || f != 1.0;
          }
          mx[t] = nm[l];
        }
        if (gt && rescale)
          for (int c = 0; c < C; ++c) *(v16*)(gt + (size_t)32 * p * C + (size_t)c * w + half) *= f16;
      }
      // g^T (C, w) += Wt^T E: a(i = c, k = v) = Wt[v C + c].
      if (gt)
        for (int cb = 0; cb < C; cb += R)
          panel_tile<true>(vc, Wt + cb, 1, C, zp, w, gt + (size_t)32 * p * C + (size_t)cb * w);
    }
  }
  for (int t = 0; t < m; ++t) {
    const double log_sum = std::log(sum[t]);
    lse[t] = (float)(mx[t] + log_sum);
    logp[t] = (float)((double)(zt[t] - mx[t]) - log_sum);
    if (entropy) entropy[t] = (float)(log_sum - wsum[t] / sum[t]);
    if (g) {
      const float inv_sum = (float)(1.0 / sum[t]);
      const int p = t / 32, w = width(p);
      const float* src = gt + (size_t)32 * p * C + t % 32;
      for (int c = 0; c < C; ++c) g[(size_t)t * C + c] = src[(size_t)c * w] * inv_sum;
    }
  }
}

}  // namespace
#endif

bool lm_head_fused_available() {
#if defined(__x86_64__) && defined(__GNUC__)
  return gemm_avx512();
#else
  return false;
#endif
}

bool lm_head_fused_applies(int N, int C, int V, const int32_t* mask_idx) {
  if (!lm_head_fused_available() || V <= kLmHeadCols || N <= kGemmSmallRows || C % kLmHeadFusedRows != 0 ||
      gemm_rowwise() || gemm_blocked())
    return false;
  if (mask_idx)
    for (int n = 0; n < N; ++n)
      if (mask_idx[n] >= 0) return false;
  return true;
}

LmHeadFusedTiles lm_head_fused_tiles(int C) {
  LmHeadFusedTiles t;
  t.vocab_rows = std::max(32, std::min(256, (1 << 16) / std::max(C, 1))) / kLmHeadFusedRows * kLmHeadFusedRows;
  t.token_block = std::max(32, (1 << 18) / (2 * C + t.vocab_rows) / 32 * 32);
  return t;
}

void lm_head_forward_fused(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                           const int32_t* targets, int N, int C, int V, const float* inv_temp, LmHeadFusedTiles tiles) {
  CHECK(lm_head_fused_available(), "lm_head_forward_fused: this CPU has no AVX-512");
  CHECK(C % kLmHeadFusedRows == 0 && tiles.vocab_rows > 0 && tiles.token_block > 0,
        "lm_head_forward_fused: C must be a multiple of kLmHeadFusedRows, tiles positive");
#if defined(__x86_64__) && defined(__GNUC__)
  const int groups = (N + 15) / 16;
  bool failed = false;
#pragma omp parallel
  {
#ifdef _OPENMP
    const int T = omp_get_num_threads(), id = omp_get_thread_num();
#else
    const int T = 1, id = 0;
#endif
    static thread_local FusedBuffers buf;
    const int r0 = std::min(N, (int)((long)groups * id / T) * 16);
    const int r1 = std::min(N, (int)((long)groups * (id + 1) / T) * 16);
    try {  // an exception must not leave the parallel region (std::terminate): reported after it
      for (int b0 = r0; b0 < r1; b0 += tiles.token_block) {
        const int m = std::min(tiles.token_block, r1 - b0);
        fused_block(logp + b0, lse + b0, entropy ? entropy + b0 : nullptr, g ? g + (size_t)b0 * C : nullptr,
                    h + (size_t)b0 * C, W, targets + b0, m, C, V, inv_temp ? inv_temp + b0 : nullptr, tiles.vocab_rows,
                    buf);
      }
    } catch (...) {
#pragma omp atomic write
      failed = true;
    }
  }
  CHECK(!failed, "lm_head_forward_fused: out of memory for the per-thread tile buffers");
#else
  (void)logp; (void)lse; (void)entropy; (void)g; (void)h; (void)W; (void)targets; (void)N; (void)V; (void)inv_temp;
#endif
}

void lm_head_forward(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                     const int32_t* targets, int N, int C, int V, float* scratch, int chunk, const float* inv_temp,
                     const int32_t* mask_idx, const uint32_t* masks) {
  if (lm_head_fused_applies(N, C, V, mask_idx)) {
    lm_head_forward_fused(logp, lse, entropy, g, h, W, targets, N, C, V, inv_temp, lm_head_fused_tiles(C));
    return;
  }
  lm_head_forward_tiles(logp, lse, entropy, g, h, W, targets, N, C, V, scratch, chunk, lm_head_tile_cols(V), inv_temp,
                        mask_idx, masks);
}

void lm_head_forward_tiles(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                           const int32_t* targets, int N, int C, int V, float* scratch, int chunk, int cols,
                           const float* inv_temp, const int32_t* mask_idx, const uint32_t* masks) {
  const size_t words = ((size_t)V + 31) / 32;
  std::vector<RowState> st((size_t)std::min(chunk, N));
  for (int n0 = 0; n0 < N; n0 += chunk) {
    const int m = std::min(chunk, N - n0);
    float* gc = g ? g + (size_t)n0 * C : nullptr;
    for (int i = 0; i < m; ++i) st[i] = RowState{0.0, 0.0, -INFINITY, 0.0f, 1.0f};
    for (int v0 = 0; v0 < V; v0 += cols) {
      const int vc = std::min(cols, V - v0);
      const WeightRef Wt = weight_offset(W, (size_t)v0 * C);
      gemm_w(true, m, vc, C, 1.0f, h + (size_t)n0 * C, C, Wt, C, 0.0f, scratch, vc);
#pragma omp parallel for schedule(static)
      for (int i = 0; i < m; ++i) {
        const int n = n0 + i;
        tile_row(st[i], scratch + (size_t)i * vc, v0, vc, targets[n], inv_temp ? inv_temp[n] : 1.0f,
                 mask_idx && mask_idx[n] >= 0 ? masks + (size_t)mask_idx[n] * words : nullptr);
      }
      // g (m, C) = f g + E Wt: the rows rescaled to the new max, then the tile's product (beta = 0 on the first).
      if (gc) {
        if (v0 > 0) {
#pragma omp parallel for schedule(static)
          for (int i = 0; i < m; ++i)
            if (st[i].resc != 1.0f)
              for (int c = 0; c < C; ++c) gc[(size_t)i * C + c] *= st[i].resc;
        }
        gemm_w(false, m, C, vc, 1.0f, scratch, vc, Wt, C, v0 > 0 ? 1.0f : 0.0f, gc, C);
      }
    }
    // P = E / Σ: 1 / Σ goes onto g (C per row) rather than onto every probability.
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; ++i) {
      const int n = n0 + i;
      const double log_sum = std::log(st[i].sum);
      lse[n] = (float)(st[i].mx + log_sum);
      logp[n] = (float)((double)(st[i].zt - st[i].mx) - log_sum);
      if (entropy) entropy[n] = (float)(log_sum - st[i].wsum / st[i].sum);
      if (gc) {
        const float inv_sum = (float)(1.0 / st[i].sum);
        for (int c = 0; c < C; ++c) gc[(size_t)i * C + c] *= inv_sum;
      }
    }
  }
}

void lm_head_backward(float* dh, const float* dlogp, const float* g, WeightRef W, const int32_t* targets, int N,
                      int C, const float* inv_temp) {
  if (W.is_f32()) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float d = inv_temp ? dlogp[n] * inv_temp[n] : dlogp[n];
      const float* wt = W.f32() + (size_t)targets[n] * C;
      const float* gn = g + (size_t)n * C;
      float* o = dh + (size_t)n * C;
      for (int c = 0; c < C; ++c) o[c] = d * (wt[c] - gn[c]);
    }
    return;
  }
  // 16-bit head: the target's row is widened into dh first, then the same arithmetic in place.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float d = inv_temp ? dlogp[n] * inv_temp[n] : dlogp[n];
    const float* gn = g + (size_t)n * C;
    float* o = dh + (size_t)n * C;
    widen(o, W, (size_t)targets[n] * C, (size_t)C);
    for (int c = 0; c < C; ++c) o[c] = d * (o[c] - gn[c]);
  }
}

}  // namespace mcprl
