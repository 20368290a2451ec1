// SwiGLU MLP activation. Backward rule: parameter grads +=, activation grads =.
//
// silu(g) = g s with s = sigmoid(g). Both branches of the sigmoid take e = exp(-|g|) <= 1, the exponential of a
// non-positive input (exp_nonpos8, 8 lanes: GCC leaves libm's expf scalar), so nothing overflows:
//   r = 1 / (1 + e),  q = e r,  s = g >= 0 ? r : q,  1 - s = g >= 0 ? q : r
// (1 - s taken from its own branch, not by subtraction, keeps its relative precision when s is near 1). Below
// g = -87 (where exp_nonpos8 stops at exp(-87)) s is 0: silu's true value there is below 1e-35 in magnitude.
#include "swiglu.h"

#include <cstring>

#include "../kernels/fastmath.h"

namespace mcprl {

namespace {

typedef float v8u __attribute__((vector_size(32), aligned(4)));

// s = sigmoid(g) and sc = 1 - s on 8 lanes.
inline void sigmoid8(f32x8 g, f32x8& s, f32x8& sc) {
  const f32x8 zero = {}, one = zero + 1.0f;
  const f32x8 neg = g < zero ? g : zero - g;  // -|g|
  const f32x8 e = exp_nonpos8(neg);
  const f32x8 r = one / (one + e), q = e * r;
  const f32x8 tiny = g < zero - 87.0f ? zero : q;  // exp(g) below exp(-87): 0
  s = g >= zero ? r : tiny;
  sc = g >= zero ? q : r;
}

// The loops run over whole vectors: a tail of n < 8 goes through a zero-padded copy.
inline f32x8 load(const float* p, long n) {
  if (n >= 8) return *(const v8u*)p;
  f32x8 v = {};
  std::memcpy(&v, p, sizeof(float) * n);
  return v;
}
inline void store(float* p, f32x8 v, long n) {
  if (n >= 8) *(v8u*)p = v;
  else std::memcpy(p, &v, sizeof(float) * n);
}

}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, long N) {
  const long blocks = (N + 7) / 8;
#pragma omp parallel for schedule(static)
  for (long b = 0; b < blocks; ++b) {
    const long i = b * 8, n = N - i;
    const f32x8 g = load(gate + i, n);
    f32x8 s, sc;
    sigmoid8(g, s, sc);
    store(out + i, g * s * load(up + i, n), n);
  }
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long N) {
  // d silu / dg = s (1 + g (1 - s)).
  const long blocks = (N + 7) / 8;
#pragma omp parallel for schedule(static)
  for (long b = 0; b < blocks; ++b) {
    const long i = b * 8, n = N - i;
    const f32x8 g = load(gate + i, n), d = load(dout + i, n);
    f32x8 s, sc;
    sigmoid8(g, s, sc);
    store(dup + i, d * (g * s), n);
    store(dgate + i, d * load(up + i, n) * (s * (1.0f + g * sc)), n);
  }
}

}  // namespace mcprl
