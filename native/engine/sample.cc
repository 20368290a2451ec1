#include "sample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "../core/common.h"
#include "../kernels/fastmath.h"

namespace mcprl {

uint64_t rng_next(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

const uint32_t* TokenMasks::row(size_t i, int V) const {
  if (idx.empty() || idx[i] < 0) return nullptr;
  const size_t words = ((size_t)V + 31) / 32;
  CHECK(((size_t)idx[i] + 1) * words <= bits.size(), "token mask index out of range");
  return bits.data() + (size_t)idx[i] * words;
}

uint64_t rng_seed(uint64_t seed, uint64_t stream) {
  uint64_t s = seed ^ (stream * 0xD1B54A32D192ED03ull);
  rng_next(s);
  return s;
}

// w[v] = exp_fast((z[v] - mx) * invTf) for every token, allowed or not (the others are never read): 8 lanes at a
// time (exp_fast8, the same bits), so that the sums and scans below read each weight instead of computing it.
static void exp_weights(const float* z, int V, float mx, float invTf, float* w) {
  int v = 0;
  for (; v + 8 <= V; v += 8) {
    f32x8 x;
    std::memcpy(&x, z + v, sizeof x);
    const f32x8 e = exp_fast8((x - mx) * invTf);
    std::memcpy(w + v, &e, sizeof e);
  }
  for (; v < V; ++v) w[v] = exp_fast((z[v] - mx) * invTf);
}

// log of the sum over the allowed tokens, in token order, of the weights w (exp_weights with the same mx).
static double masked_lse(const float* w, int V, const uint32_t* allow) {
  double sum = 0.0;
  for (int v = 0; v < V; ++v)
    if (token_allowed(allow, v)) sum += (double)w[v];
  return std::log(sum);
}

// The n largest entries of z (n <= V), largest first, ties by lower id: one pass keeping a sorted list.
static void top_n(const float* z, int V, int n, int32_t* ids) {
  int have = 0;
  for (int v = 0; v < V; ++v) {
    // Strictly larger than the current last (an equal logit has a higher id, so it ranks below).
    if (have == n && !(z[v] > z[ids[n - 1]])) continue;
    int at = have < n ? have++ : n - 1;
    while (at > 0 && z[v] > z[ids[at - 1]]) {
      ids[at] = ids[at - 1];
      --at;
    }
    ids[at] = v;
  }
}

int sample_token(const float* z, int V, const SampleParams& p, const uint32_t* allow, uint64_t& rng, float* logprob,
                 float* sampler_logprob, int32_t* top_ids, float* top_lps, std::vector<int>& idx) {
  if (allow) {
    bool any = false;
    for (int v = 0; v < V && !any; ++v) any = token_allowed(allow, v);
    if (!any) allow = nullptr;
  }
  // log pi at temperature 1 over the full vocabulary.
  float mx = -INFINITY;
  int arg = 0;
  for (int v = 0; v < V; ++v)
    if (z[v] > mx) { mx = z[v]; arg = v; }
  // exp(z - mx), then their sum in token order (x * 1 is x: the weights at temperature 1).
  thread_local std::vector<float> ebuf;
  ebuf.resize(V);
  exp_weights(z, V, mx, 1.0f, ebuf.data());
  double sum = 0.0;
  for (int v = 0; v < V; ++v) sum += (double)ebuf[v];
  const double lse = mx + std::log(sum);
  int tok = arg;
  if (allow) {
    // Greedy among the allowed tokens; their own maximum is the reference for the sampling weights below,
    // which could otherwise all underflow when the allowed tokens are far less likely than the best one.
    mx = -INFINITY;
    for (int v = 0; v < V; ++v)
      if (token_allowed(allow, v) && z[v] > mx) { mx = z[v]; tok = v; }
  }
  // Tempered weights of every token (w), for the sampler and its log-probability; mx is now the largest allowed
  // logit.
  const double Ts = p.temperature > 0.0f ? (double)p.temperature : 1.0;
  const float invTf = (float)(1.0 / Ts);
  thread_local std::vector<float> wbuf;
  const bool sampling = p.temperature > 0.0f && p.top_k != 1;
  // Without a mask mx is still the row's maximum, so at temperature 1 the weights are those of the lse above:
  // a second pass only with a mask or another temperature.
  const float* w = ebuf.data();
  if (allow || Ts != 1.0) {
    wbuf.resize(V);
    exp_weights(z, V, mx, invTf, wbuf.data());
    w = wbuf.data();
  }
  // The sum in token order of w over the allowed tokens, once known (the softmax's denominator): without a mask at
  // temperature 1 it is the lse's sum; a sampler that keeps every allowed token sums it first.
  double allowed_sum = !allow && Ts == 1.0 ? sum : -1.0;
  if (sampling) {
    idx.resize(V);
    int n = V;
    if (allow) {
      n = 0;
      for (int v = 0; v < V; ++v)
        if (token_allowed(allow, v)) idx[n++] = v;
      idx.resize(n);
    } else {
      std::iota(idx.begin(), idx.end(), 0);
    }
    auto desc = [&](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
    const int allowed = n;
    if (p.top_k > 0 && p.top_k < n) {
      std::nth_element(idx.begin(), idx.begin() + p.top_k, idx.end(), desc);
      n = p.top_k;
    }
    // Unnormalised tempered probabilities of the candidates; total over all of them.
    auto weight = [&](int v) { return (double)w[v]; };
    double total = 0.0;
    if (n == allowed && allowed_sum >= 0.0) {
      total = allowed_sum;
    } else {
      for (int i = 0; i < n; ++i) total += weight(idx[i]);
      if (n == allowed) allowed_sum = total;
    }
    if (p.top_p < 1.0f) {
      // Sort candidates by logit; try the best 1024 first (almost always enough), else sort them all.
      int head = std::min(n, 1024);
      double need = (double)p.top_p * total, acc = 0.0;
      bool done = false;
      for (int pass = 0; pass < 2 && !done; ++pass) {
        int m = pass == 0 ? head : n;
        std::partial_sort(idx.begin(), idx.begin() + m, idx.begin() + n, desc);
        acc = 0.0;
        for (int i = 0; i < m; ++i) {
          acc += weight(idx[i]);
          // Keep the smallest prefix whose mass reaches top_p (the crossing token included).
          if (acc >= need) { n = i + 1; done = true; break; }
        }
        if (m == n) done = true;
      }
      total = 0.0;
      for (int i = 0; i < n; ++i) total += weight(idx[i]);
    }
    double u = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0) * total;
    tok = idx[n - 1];
    double acc = 0.0;
    for (int i = 0; i < n; ++i) {
      acc += weight(idx[i]);
      if (u < acc) { tok = idx[i]; break; }
    }
  }
  *logprob = (float)(z[tok] - lse);
  const int n = std::min(p.top_logprobs, V);
  if (n > 0) {
    top_n(z, V, n, top_ids);
    for (int i = 0; i < n; ++i) top_lps[i] = (float)(z[top_ids[i]] - lse);
  }
  if (!allow && Ts == 1.0) {
    *sampler_logprob = *logprob;
  } else {
    const double lse_allowed = allowed_sum >= 0.0 ? std::log(allowed_sum) : masked_lse(w, V, allow);
    *sampler_logprob = (float)((double)(z[tok] - mx) * invTf - lse_allowed);
  }
  return tok;
}

}  // namespace mcprl
