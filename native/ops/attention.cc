// Causal grouped-query attention over packed sequences; a query never sees another sequence's keys.
// Backward rule: parameter grads += (none here), activation grads =.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mcprl {

static inline int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

// o(8N) = sum over j < nk of (sc[j] * inv) * v(j, 0:8N), v's rows `stride` floats apart; N vectors of 8 in registers.
template <int N>
static inline void accumulate_pv(float* o, const float* sc, float inv, const float* v, int stride, int nk) {
  v8 acc[N] = {};
  for (int j = 0; j < nk; ++j) {
    const float p = sc[j] * inv;
    const v8u* vj = (const v8u*)(v + (size_t)j * stride);
    for (int n = 0; n < N; ++n) acc[n] += p * vj[n];
  }
  for (int n = 0; n < N; ++n) ((v8u*)o)[n] = acc[n];
}

void attention_forward(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H, int Hkv,
                       int D, float* scratch, int max_keys) {
  const float scale = 1.0f / std::sqrt((float)D);
  const int group = H / Hkv;
  const int kvs = Hkv * D;  // row stride of k/v
  // Work items: (segment, query, head), flattened so short decode segments still spread over threads.
  long total = 0;
  for (int s = 0; s < nseg; ++s) total += (long)segs[s].nq * H;
  // Prefix offsets to map a flat index back to its segment.
  long off[1024 + 1];
  const bool small = nseg <= 1024;
  if (small) {
    off[0] = 0;
    for (int s = 0; s < nseg; ++s) off[s + 1] = off[s] + (long)segs[s].nq * H;
  }
#pragma omp parallel for schedule(dynamic, 4)
  for (long w = 0; w < total; ++w) {
    int s = 0;
    long base = 0;
    if (small) {
      int lo = 0, hi = nseg;  // largest s with off[s] <= w
      while (hi - lo > 1) { int mid = (lo + hi) / 2; if (off[mid] <= w) lo = mid; else hi = mid; }
      s = lo; base = off[s];
    } else {
      for (s = 0; s < nseg; ++s) { long n = (long)segs[s].nq * H; if (w < base + n) break; base += n; }
    }
    const AttnSegment& sg = segs[s];
    int i = (int)((w - base) / H), h = (int)((w - base) % H);
    int row = sg.q0 + i, nk = sg.npast + i + 1, hk = h / group;
    const float* qv = q + ((size_t)row * H + h) * D;
    float* sc = scratch + (size_t)thread_id() * max_keys;
    float mx = -INFINITY;
    for (int j = 0; j < nk; ++j) {
      const float* kj = sg.k + (size_t)j * kvs + hk * D;
      float d = 0.0f;
#pragma omp simd reduction(+ : d)
      for (int c = 0; c < D; ++c) d += qv[c] * kj[c];
      d *= scale;
      sc[j] = d;
      mx = d > mx ? d : mx;
    }
    float sum = 0.0f;
    for (int j = 0; j < nk; ++j) { sc[j] = std::exp(sc[j] - mx); sum += sc[j]; }
    float inv = 1.0f / sum;
    float* o = out + ((size_t)row * H + h) * D;
    if (D % 8 == 0) {
      // o = sum_j p_j v_j, accumulated in registers 32 columns at a time: each element still gets
      // o += p_j * v_j[c] in key order, so the result is the one of the loop below, without a load and a
      // store of o per key (the store-to-load latency bounded the loop).
      for (int c0 = 0; c0 < D; c0 += 32) {
        const int w = std::min(32, D - c0);
        if (w == 32) accumulate_pv<4>(o + c0, sc, inv, sg.v + hk * D + c0, kvs, nk);
        else if (w == 24) accumulate_pv<3>(o + c0, sc, inv, sg.v + hk * D + c0, kvs, nk);
        else if (w == 16) accumulate_pv<2>(o + c0, sc, inv, sg.v + hk * D + c0, kvs, nk);
        else accumulate_pv<1>(o + c0, sc, inv, sg.v + hk * D + c0, kvs, nk);
      }
    } else {
      for (int c = 0; c < D; ++c) o[c] = 0.0f;
      for (int j = 0; j < nk; ++j) {
        const float* vj = sg.v + (size_t)j * kvs + hk * D;
        float p = sc[j] * inv;
#pragma omp simd
        for (int c = 0; c < D; ++c) o[c] += p * vj[c];
      }
    }
    if (lse) lse[(size_t)row * H + h] = mx + std::log(sum);
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* cu_seqlens, int nseq, int H,
                        int Hkv, int D, float* scratch, int max_keys) {
  const float scale = 1.0f / std::sqrt((float)D);
  const int group = H / Hkv;
  const int qs = H * D, kvs = Hkv * D;
  // One work item per (sequence, kv head): it owns dk/dv of that head and dq of its query heads, so no
  // two threads write the same element.
#pragma omp parallel for schedule(dynamic, 1)
  for (int w = 0; w < nseq * Hkv; ++w) {
    int s = w / Hkv, hk = w % Hkv;
    int t0 = cu_seqlens[s], n = cu_seqlens[s + 1] - t0;
    float* dp = scratch + (size_t)thread_id() * max_keys;
    for (int j = 0; j < n; ++j) {
      std::memset(dk + (size_t)(t0 + j) * kvs + hk * D, 0, sizeof(float) * D);
      std::memset(dv + (size_t)(t0 + j) * kvs + hk * D, 0, sizeof(float) * D);
    }
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      for (int i = 0; i < n; ++i) {
        int row = t0 + i;
        const float* qi = q + (size_t)row * qs + h * D;
        const float* gi = dout + (size_t)row * qs + h * D;
        const float* oi = out + (size_t)row * qs + h * D;
        float* dqi = dq + (size_t)row * qs + h * D;
        float L = lse[(size_t)row * H + h];
        float Di = 0.0f;
        for (int c = 0; c < D; ++c) Di += gi[c] * oi[c];
        for (int c = 0; c < D; ++c) dqi[c] = 0.0f;
        for (int j = 0; j <= i; ++j) {
          const float* kj = k + (size_t)(t0 + j) * kvs + hk * D;
          const float* vj = v + (size_t)(t0 + j) * kvs + hk * D;
          float sdot = 0.0f, gdot = 0.0f;
#pragma omp simd reduction(+ : sdot, gdot)
          for (int c = 0; c < D; ++c) { sdot += qi[c] * kj[c]; gdot += gi[c] * vj[c]; }
          float p = std::exp(sdot * scale - L);
          float ds = p * (gdot - Di) * scale;
          float* dvj = dv + (size_t)(t0 + j) * kvs + hk * D;
          float* dkj = dk + (size_t)(t0 + j) * kvs + hk * D;
#pragma omp simd
          for (int c = 0; c < D; ++c) {
            dvj[c] += p * gi[c];
            dkj[c] += ds * qi[c];
            dqi[c] += ds * kj[c];
          }
        }
      }
    }
    (void)dp;
  }
  (void)max_keys;
}

}  // namespace mcprl
