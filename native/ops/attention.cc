// Causal grouped-query attention over packed sequences and KV-cache segments, as flash-attention tiles:
// S = Q Kᵀ on a (query rows × key block) tile, an online softmax (running max and sum per row), O += P V;
// the backward recomputes P per tile from the saved lse. A query never sees another sequence's keys.
// Backward rule: parameter grads += (none here), activation grads =.
//
// Batch invariance (decode batches, a prompt prefilled in one call or split over calls with npast, the prefix
// KV cache built on this): a row's output and lse are a function of the row and its keys only. Key blocks sit
// at fixed absolute positions (multiples of BK from key 0) and are reduced in order; every score is summed in
// one fixed order (8 lanes over D, then one tree); every output element accumulates its keys in order. Which other rows share a tile
// changes nothing: a key after a row's position gets probability exactly 0, and adding 0 · v leaves the sum as
// it is. The tile kernels are written once per row count, so a row computes the same in any slot of any tile.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "../core/common.h"
#include "../kernels/fastmath.h"

namespace mcprl {

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

namespace {

constexpr int BK = 64;         // keys per block; block boundaries at multiples of BK (batch invariance)
constexpr int TILE_ROWS = 48;  // (query, head) rows per tile: whole groups of heads that read one kv head
constexpr int MR = 6;          // rows per register tile of the P V product (6 x 16 floats, as the GEMM's)

typedef int v8i __attribute__((vector_size(32)));

inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

inline v8 hadd(v8 a, v8 b) {
  return __builtin_shuffle(a, b, (v8i){0, 2, 8, 10, 4, 6, 12, 14}) + __builtin_shuffle(a, b, (v8i){1, 3, 9, 11, 5, 7, 13, 15});
}

// Lane i of the result = the sum of x[i]'s lanes, every lane in the one tree ((0+1)+(2+3))+((4+5)+(6+7)).
inline v8 hsum8(const v8* x) {
  const v8 u0 = hadd(hadd(x[0], x[1]), hadd(x[2], x[3])), u1 = hadd(hadd(x[4], x[5]), hadd(x[6], x[7]));
  return __builtin_shuffle(u0, u1, (v8i){0, 1, 2, 3, 8, 9, 10, 11}) +
         __builtin_shuffle(u0, u1, (v8i){4, 5, 6, 7, 12, 13, 14, 15});
}

// Scores of 2 rows of a (`lda` apart) with 4 keys b[j] (rows of the KV cache or packed k/v, read in place):
// s[r * lds + j] = Σ_d a[r][d] · b[j][d], each an 8-lane sum over d in order, then hsum8's tree, then the
// d >= D & ~7 tail in order. The same arithmetic for every (row, key), wherever they sit in a tile.
inline void dot_2x4(float* s, int lds, const float* a, int lda, const float* const* b, int D) {
  v8 acc[8] = {};
  const int D8 = D & ~7;
  for (int d = 0; d < D8; d += 8) {
    const v8 a0 = *(const v8u*)(a + d), a1 = *(const v8u*)(a + lda + d);
    for (int j = 0; j < 4; ++j) {
      const v8 bj = *(const v8u*)(b[j] + d);
      acc[j] += a0 * bj;
      acc[4 + j] += a1 * bj;
    }
  }
  float t[8];
  const v8 sum = hsum8(acc);
  std::memcpy(t, &sum, sizeof t);
  for (int d = D8; d < D; ++d)
    for (int j = 0; j < 4; ++j) {
      t[j] += a[d] * b[j][d];
      t[4 + j] += a[lda + d] * b[j][d];
    }
  for (int j = 0; j < 4; ++j) {
    s[j] = t[j];
    s[lds + j] = t[4 + j];
  }
}

// s(r, j) for rows r0 <= r < r1 of a and keys j < nj (nj and r1 - r0 rounded up to 4 and 2: a has a spare zero
// row, keys past nj read `zero`), key j at base + j * stride.
void dot_tile(float* s, int lds, const float* a, int lda, int r0, int r1, const float* base, int stride, int nj,
              const float* zero, int D) {
  for (int j0 = 0; j0 < nj; j0 += 4) {
    const float* b[4];
    for (int j = 0; j < 4; ++j) b[j] = j0 + j < nj ? base + (size_t)(j0 + j) * stride : zero;
    for (int r = r0; r < r1; r += 2) dot_2x4(s + (size_t)r * lds + j0, lds, a + (size_t)r * lda, lda, b, D);
  }
}

// c(M, D) += p(M, nj) b(nj, D): c[r][x] += Σ_{j < nj} p[r * ldp + j] · b[j * ldb + x], summed over j in order
// (in registers, 16 or 8 columns at a time, then the D % 8 tail).
template <int M>
void acc_rows(float* c, int ldc, const float* p, int ldp, const float* b, int ldb, int D, int nj) {
  int x0 = 0;
  for (; x0 + 16 <= D; x0 += 16) {
    v8 acc[M][2];
    for (int r = 0; r < M; ++r) {
      acc[r][0] = *(const v8u*)(c + (size_t)r * ldc + x0);
      acc[r][1] = *(const v8u*)(c + (size_t)r * ldc + x0 + 8);
    }
    for (int j = 0; j < nj; ++j) {
      const v8 b0 = *(const v8u*)(b + (size_t)j * ldb + x0), b1 = *(const v8u*)(b + (size_t)j * ldb + x0 + 8);
      for (int r = 0; r < M; ++r) {
        const float pr = p[(size_t)r * ldp + j];
        acc[r][0] += pr * b0;
        acc[r][1] += pr * b1;
      }
    }
    for (int r = 0; r < M; ++r) {
      *(v8u*)(c + (size_t)r * ldc + x0) = acc[r][0];
      *(v8u*)(c + (size_t)r * ldc + x0 + 8) = acc[r][1];
    }
  }
  if (x0 + 8 <= D) {
    v8 acc[M];
    for (int r = 0; r < M; ++r) acc[r] = *(const v8u*)(c + (size_t)r * ldc + x0);
    for (int j = 0; j < nj; ++j) {
      const v8 b0 = *(const v8u*)(b + (size_t)j * ldb + x0);
      for (int r = 0; r < M; ++r) acc[r] += p[(size_t)r * ldp + j] * b0;
    }
    for (int r = 0; r < M; ++r) *(v8u*)(c + (size_t)r * ldc + x0) = acc[r];
    x0 += 8;
  }
  for (int r = 0; r < M; ++r)
    for (int x = x0; x < D; ++x) {
      float a = c[(size_t)r * ldc + x];
      for (int j = 0; j < nj; ++j) a += p[(size_t)r * ldp + j] * b[(size_t)j * ldb + x];
      c[(size_t)r * ldc + x] = a;
    }
}

// acc_rows over `rows` rows: full MR-row register tiles, then one of 1..MR-1 rows.
void acc_tile(float* c, int ldc, const float* p, int ldp, const float* b, int ldb, int D, int nj, int rows) {
  int r = 0;
  for (; r + MR <= rows; r += MR) acc_rows<MR>(c + (size_t)r * ldc, ldc, p + (size_t)r * ldp, ldp, b, ldb, D, nj);
  float* cr = c + (size_t)r * ldc;
  const float* pr = p + (size_t)r * ldp;
  switch (rows - r) {
    case 1: acc_rows<1>(cr, ldc, pr, ldp, b, ldb, D, nj); break;
    case 2: acc_rows<2>(cr, ldc, pr, ldp, b, ldb, D, nj); break;
    case 3: acc_rows<3>(cr, ldc, pr, ldp, b, ldb, D, nj); break;
    case 4: acc_rows<4>(cr, ldc, pr, ldp, b, ldb, D, nj); break;
    case 5: acc_rows<5>(cr, ldc, pr, ldp, b, ldb, D, nj); break;
    default: break;
  }
}

// p[j] = exp(s[j] - base) for j < nv, exactly 0 for nv <= j < BK; returns Σ p over the whole block in one fixed
// order (8 lane sums over the BK entries, then hsum8's tree): nothing depends on nv or on the tile.
inline float block_exp(float* p, const float* s, float base, int nv) {
  const v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
  const v8 zero = {};
  v8 acc = {};
  for (int j0 = 0; j0 < BK; j0 += 8) {
    const v8i seen = lane + j0 < nv;
    const v8 x = *(const v8u*)(s + j0) - base;
    const v8 e = exp_nonpos8(seen ? x : zero - 87.0f);
    const v8 pj = seen ? e : zero;
    *(v8u*)(p + j0) = pj;
    acc += pj;
  }
  const v8 sums[8] = {acc, zero, zero, zero, zero, zero, zero, zero};
  return hsum8(sums)[0];
}

// Per-thread tile buffers, kept between calls (decode calls this once per layer and step). Called inside the
// parallel loops, where nothing may throw: null when the allocation fails, and the caller reports it after.
float* thread_buffer(size_t n) {
  static thread_local std::vector<float> buf;
  try {
    if (buf.size() < n) buf.resize(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  return buf.data();
}

// Query rows per tile: TILE_ROWS rows of (query, head) pairs, whole groups of heads that read one kv head.
inline int tile_queries(int group) { return std::max(1, TILE_ROWS / group); }

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H, int Hkv,
                       int D) {
  const float scale = 1.0f / std::sqrt((float)D);
  const int group = H / Hkv, kvs = Hkv * D, Dp = round_up(D, 8);
  const int BQ = tile_queries(group), R = round_up(BQ * group, 2);
  // Work items: (segment, kv head, block of BQ queries), flattened so short decode segments spread over threads.
  std::vector<long> off((size_t)nseg + 1, 0);
  for (int s = 0; s < nseg; ++s) off[s + 1] = off[s] + (long)(segs[s].nq + BQ - 1) / BQ * Hkv;
  const long total = off[nseg];
  const size_t per_thread = (size_t)2 * R * Dp + (size_t)2 * R * BK + (size_t)2 * R + Dp;
  bool out_of_memory = false;
#pragma omp parallel for schedule(dynamic, 1)
  for (long w = 0; w < total; ++w) {
    const int s = (int)(std::upper_bound(off.begin(), off.end(), w) - off.begin()) - 1;
    const AttnSegment& sg = segs[s];
    const long local = w - off[s];
    const int hk = (int)(local % Hkv), i0 = (int)(local / Hkv) * BQ;
    const int ni = std::min(BQ, sg.nq - i0), rows = ni * group;
    float* qt = thread_buffer(per_thread);  // (R, Dp) scaled queries, row = query * group + head in group
    if (!qt) {
#pragma omp atomic write
      out_of_memory = true;
      continue;
    }
    float* ot = qt + (size_t)R * Dp;        // (R, Dp) unnormalised output
    float* st = ot + (size_t)R * Dp;        // (R, BK) scores
    float* pt = st + (size_t)R * BK;        // (R, BK) probabilities
    float* mx = pt + (size_t)R * BK;        // (R) running max
    float* sum = mx + R;                    // (R) running sum
    float* zero = sum + R;                  // (Dp) the key a padded slot reads
    std::memset(qt, 0, sizeof(float) * R * Dp);  // also the padded row of an odd count
    std::memset(ot, 0, sizeof(float) * R * Dp);
    std::memset(zero, 0, sizeof(float) * Dp);
    for (int r = 0; r < rows; ++r) {
      const float* src = q + ((size_t)(sg.q0 + i0 + r / group) * H + hk * group + r % group) * D;
      for (int d = 0; d < D; ++d) qt[(size_t)r * Dp + d] = src[d] * scale;
      mx[r] = -INFINITY;
      sum[r] = 0.0f;
    }
    const int first = sg.npast + i0, last = first + ni - 1;  // positions of the tile's first and last query
    const float* kh = sg.k + hk * D;
    const float* vh = sg.v + hk * D;
    for (int k0 = 0; k0 <= last; k0 += BK) {
      const int kn = std::min(BK, last + 1 - k0);
      // Rows before r0 sit before the block (rows go by position): they take no part in it.
      const int r0 = k0 > first ? (k0 - first) * group : 0;
      dot_tile(st, BK, qt, Dp, r0, rows, kh + (size_t)k0 * kvs, kvs, kn, zero, D);
      for (int r = r0; r < rows; ++r) {
        const int nv = std::min(kn, first + r / group - k0 + 1);  // keys of this block the row sees, >= 1
        float* pr = pt + (size_t)r * BK;
        const float* sr = st + (size_t)r * BK;
        float m = mx[r];
#pragma omp simd reduction(max : m)
        for (int j = 0; j < BK; ++j) m = std::max(m, j < nv ? sr[j] : -INFINITY);
        const float alpha = mx[r] == -INFINITY ? 0.0f : exp_nonpos(mx[r] - m);
        sum[r] = sum[r] * alpha + block_exp(pr, sr, m, nv);
        if (alpha != 1.0f) {
          float* orow = ot + (size_t)r * Dp;
          for (int d = 0; d < D; ++d) orow[d] *= alpha;
        }
        mx[r] = m;
      }
      acc_tile(ot + (size_t)r0 * Dp, Dp, pt + (size_t)r0 * BK, BK, vh + (size_t)k0 * kvs, kvs, D, kn, rows - r0);
    }
    for (int r = 0; r < rows; ++r) {
      const size_t row = (size_t)(sg.q0 + i0 + r / group) * H + hk * group + r % group;
      const float inv = 1.0f / sum[r];
      float* o = out + row * D;
      for (int d = 0; d < D; ++d) o[d] = ot[(size_t)r * Dp + d] * inv;
      if (lse) lse[row] = mx[r] + std::log(sum[r]);
    }
  }
  CHECK(!out_of_memory, "attention: out of memory for the per-thread tile buffers");
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* cu_seqlens, int nseq, int H,
                        int Hkv, int D) {
  const float scale = 1.0f / std::sqrt((float)D);
  const int group = H / Hkv, qs = H * D, kvs = Hkv * D, Dp = round_up(D, 8);
  const int BQ = tile_queries(group), R = round_up(BQ * group, 2);
  const size_t per_thread = (size_t)3 * R * Dp + (size_t)4 * R * BK + (size_t)2 * BK * Dp + (size_t)2 * R + Dp;
  bool out_of_memory = false;
  // One work item per (sequence, kv head): it owns dk/dv of that head and dq of its query heads, so no two
  // threads write the same element. Key blocks outer (their dk/dv stay in the tile), query tiles inner.
#pragma omp parallel for schedule(dynamic, 1)
  for (int w = 0; w < nseq * Hkv; ++w) {
    const int s = w / Hkv, hk = w % Hkv;
    const int t0 = cu_seqlens[s], n = cu_seqlens[s + 1] - t0;
    float* qt = thread_buffer(per_thread);  // (R, Dp) scaled queries
    if (!qt) {
#pragma omp atomic write
      out_of_memory = true;
      continue;
    }
    float* gt = qt + (size_t)R * Dp;        // (R, Dp) dout
    float* dqt = gt + (size_t)R * Dp;       // (R, Dp) this block's share of dq / scale
    float* st = dqt + (size_t)R * Dp;       // (R, BK) scores, then P
    float* dst = st + (size_t)R * BK;       // (R, BK) dP, then dS
    float* ptt = dst + (size_t)R * BK;      // (BK, R) Pᵀ
    float* dstt = ptt + (size_t)R * BK;     // (BK, R) dSᵀ
    float* dkb = dstt + (size_t)R * BK;     // (BK, Dp) dk of the block
    float* dvb = dkb + (size_t)BK * Dp;     // (BK, Dp) dv of the block
    float* Lr = dvb + (size_t)BK * Dp;      // (R) lse
    float* Dr = Lr + R;                     // (R) Σ dout · out
    float* zero = Dr + R;                   // (Dp) the key a padded slot reads
    std::memset(qt, 0, sizeof(float) * R * Dp);
    std::memset(gt, 0, sizeof(float) * R * Dp);
    std::memset(zero, 0, sizeof(float) * Dp);
    const float* kh = k + (size_t)t0 * kvs + hk * D;
    const float* vh = v + (size_t)t0 * kvs + hk * D;
    for (int i = 0; i < n; ++i)
      for (int hh = 0; hh < group; ++hh) std::memset(dq + (size_t)(t0 + i) * qs + (hk * group + hh) * D, 0, sizeof(float) * D);
    for (int k0 = 0; k0 < n; k0 += BK) {
      const int kn = std::min(BK, n - k0);
      std::memset(dkb, 0, sizeof(float) * BK * Dp);
      std::memset(dvb, 0, sizeof(float) * BK * Dp);
      for (int i0 = k0; i0 < n; i0 += BQ) {  // queries before k0 see none of the block
        const int ni = std::min(BQ, n - i0), rows = ni * group;
        for (int r = 0; r < rows; ++r) {
          const size_t row = (size_t)(t0 + i0 + r / group) * H + hk * group + r % group;
          const float* qr = q + row * D;
          const float* gr = dout + row * D;
          const float* orow = out + row * D;
          float di = 0.0f;
          for (int d = 0; d < D; ++d) {
            qt[(size_t)r * Dp + d] = qr[d] * scale;
            gt[(size_t)r * Dp + d] = gr[d];
            di += gr[d] * orow[d];
          }
          Lr[r] = lse[row];
          Dr[r] = di;
        }
        if (rows % 2) {  // the spare row of the last pair
          std::memset(qt + (size_t)rows * Dp, 0, sizeof(float) * Dp);
          std::memset(gt + (size_t)rows * Dp, 0, sizeof(float) * Dp);
        }
        dot_tile(st, BK, qt, Dp, 0, rows, kh + (size_t)k0 * kvs, kvs, kn, zero, D);   // S
        dot_tile(dst, BK, gt, Dp, 0, rows, vh + (size_t)k0 * kvs, kvs, kn, zero, D);  // dP = dout Vᵀ
        for (int r = 0; r < rows; ++r) {
          const int nv = std::min(kn, i0 + r / group - k0 + 1);
          float* pr = st + (size_t)r * BK;
          float* dsr = dst + (size_t)r * BK;
          block_exp(pr, pr, Lr[r], nv);
          for (int j = 0; j < kn; ++j) {
            dsr[j] = pr[j] * (dsr[j] - Dr[r]);
            ptt[(size_t)j * R + r] = pr[j];
            dstt[(size_t)j * R + r] = dsr[j];
          }
        }
        acc_tile(dvb, Dp, ptt, R, gt, Dp, D, rows, kn);   // dV += Pᵀ dout
        acc_tile(dkb, Dp, dstt, R, qt, Dp, D, rows, kn);  // dK += dSᵀ (q · scale)
        std::memset(dqt, 0, sizeof(float) * (size_t)rows * Dp);
        acc_tile(dqt, Dp, dst, BK, kh + (size_t)k0 * kvs, kvs, D, kn, rows);  // dQ += dS K (· scale below)
        for (int r = 0; r < rows; ++r) {
          float* o = dq + (size_t)(t0 + i0 + r / group) * qs + (hk * group + r % group) * D;
          for (int d = 0; d < D; ++d) o[d] += dqt[(size_t)r * Dp + d] * scale;
        }
      }
      for (int j = 0; j < kn; ++j) {
        std::memcpy(dk + (size_t)(t0 + k0 + j) * kvs + hk * D, dkb + (size_t)j * Dp, sizeof(float) * D);
        std::memcpy(dv + (size_t)(t0 + k0 + j) * kvs + hk * D, dvb + (size_t)j * Dp, sizeof(float) * D);
      }
    }
  }
  CHECK(!out_of_memory, "attention: out of memory for the per-thread tile buffers");
}

// ---------------------------------------------------------------------------------------------------------
// The reference: one query row at a time, every sum in double, serial. The gradcheck (native/testing/gradcheck.cc, op
// attention_tiles) compares the tiles with it on long sequences.

void attention_forward_reference(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H,
                                 int Hkv, int D) {
  const double scale = 1.0 / std::sqrt((double)D);
  const int group = H / Hkv, kvs = Hkv * D;
  std::vector<double> p, o(D);
  for (int s = 0; s < nseg; ++s) {
    const AttnSegment& sg = segs[s];
    for (int i = 0; i < sg.nq; ++i)
      for (int h = 0; h < H; ++h) {
        const int nk = sg.npast + i + 1, hk = h / group;
        const size_t row = (size_t)(sg.q0 + i) * H + h;
        const float* qi = q + row * D;
        p.assign(nk, 0.0);
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < nk; ++j) {
          const float* kj = sg.k + (size_t)j * kvs + hk * D;
          double d = 0.0;
          for (int c = 0; c < D; ++c) d += (double)qi[c] * kj[c];
          p[j] = d * scale;
          mx = std::max(mx, p[j]);
        }
        for (int j = 0; j < nk; ++j) sum += (p[j] = std::exp(p[j] - mx));
        std::fill(o.begin(), o.end(), 0.0);
        for (int j = 0; j < nk; ++j) {
          const float* vj = sg.v + (size_t)j * kvs + hk * D;
          for (int c = 0; c < D; ++c) o[c] += p[j] / sum * vj[c];
        }
        for (int c = 0; c < D; ++c) out[row * D + c] = (float)o[c];
        if (lse) lse[row] = (float)(mx + std::log(sum));
      }
  }
}

void attention_backward_reference(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                  const float* v, const float* out, const float* lse, const int* cu_seqlens, int nseq,
                                  int H, int Hkv, int D) {
  const double scale = 1.0 / std::sqrt((double)D);
  const int group = H / Hkv, kvs = Hkv * D;
  const size_t T = (size_t)cu_seqlens[nseq];
  std::vector<double> gq(T * H * D, 0.0), gk(T * kvs, 0.0), gv(T * kvs, 0.0);
  for (int s = 0; s < nseq; ++s) {
    const int t0 = cu_seqlens[s], n = cu_seqlens[s + 1] - t0;
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < H; ++h) {
        const size_t row = (size_t)(t0 + i) * H + h;
        const int hk = h / group;
        const float *qi = q + row * D, *gi = dout + row * D, *oi = out + row * D;
        double di = 0.0;
        for (int c = 0; c < D; ++c) di += (double)gi[c] * oi[c];
        for (int j = 0; j <= i; ++j) {
          const size_t kj = (size_t)(t0 + j) * kvs + hk * D;
          double sdot = 0.0, gdot = 0.0;
          for (int c = 0; c < D; ++c) {
            sdot += (double)qi[c] * k[kj + c];
            gdot += (double)gi[c] * v[kj + c];
          }
          const double pj = std::exp(sdot * scale - lse[row]), ds = pj * (gdot - di) * scale;
          for (int c = 0; c < D; ++c) {
            gv[kj + c] += pj * gi[c];
            gk[kj + c] += ds * qi[c];
            gq[row * D + c] += ds * k[kj + c];
          }
        }
      }
  }
  for (size_t x = 0; x < gq.size(); ++x) dq[x] = (float)gq[x];
  for (size_t x = 0; x < gk.size(); ++x) dk[x] = (float)gk[x], dv[x] = (float)gv[x];
}

}  // namespace mcprl
