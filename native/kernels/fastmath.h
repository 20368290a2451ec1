// exp for the sampler's loops over the vocabulary (V ~ 150k per row): std::exp does not vectorize here (glibc's
// vector expf needs -ffast-math). Range reduction to |r| <= ln2/2 and a degree-6 Taylor polynomial: relative error
// ~2e-7, close to f32 rounding. GCC leaves loops of it scalar (the clamp and std::floor keep a branch);
// exp_fast8 below is the same arithmetic on 8 lanes.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace mcprl {

static inline float exp_fast(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  float k = std::floor(x * 1.4426950408889634f + 0.5f);
  float r = x - k * 0.693145751953125f - k * 1.428606765330187e-06f;  // x - k ln2 in two parts
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  int32_t bits = ((int32_t)k + 127) << 23;
  float s;
  std::memcpy(&s, &bits, 4);
  return p * s;
}

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

// exp_fast on 8 lanes, bit for bit: the clamp a lane select, and std::floor(y) as the nearest integer (the
// 1.5 * 2^23 trick, exact for |y| < 2^22; here |y| < 128) less one where that is above y.
static inline f32x8 exp_fast8(f32x8 x) {
  const f32x8 lo = f32x8{} - 87.0f, hi = f32x8{} + 88.0f;
  x = x < lo ? lo : (x > hi ? hi : x);
  const f32x8 y = x * 1.4426950408889634f + 0.5f;
  f32x8 k = (y + 12582912.0f) - 12582912.0f;
  k = k > y ? k - 1.0f : k;
  f32x8 r = x - k * 0.693145751953125f - k * 1.428606765330187e-06f;
  f32x8 p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const i32x8 bits = (__builtin_convertvector(k, i32x8) + 127) << 23;
  return p * (f32x8)bits;
}

namespace fastmath_detail {
inline int32_t to_i32(float k) { return (int32_t)k; }
inline i32x8 to_i32(f32x8 k) { return __builtin_convertvector(k, i32x8); }
inline float as_f32(int32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline f32x8 as_f32(i32x8 b) { return (f32x8)b; }

// exp(x) for -87 <= x <= 0, one float or 8 lanes (Cephes expf: x = k ln2 + r, degree-6 polynomial on |r| <= ln2 / 2,
// relative error about 2e-7). k = x / ln2 rounded to nearest by the 1.5 * 2^23 trick (|x / ln2| is far below
// 2^22 here): GCC vectorises std::floor only under -fno-trapping-math.
template <class F>
inline F exp_range(F x) {
  const F t = x * 1.44269504088896341f;
  const F k = (t + 12582912.0f) - 12582912.0f;
  const F r = x - k * 0.693359375f + k * 2.12194440e-4f;
  F p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * as_f32((to_i32(k) + 127) << 23);
}
}  // namespace fastmath_detail

// exp(x) for x <= 0 (softmax terms after subtracting the row's maximum). Inputs below -87 return exp(-87) ~ 1.6e-38
// instead of denormals, far below anything that matters next to the row's largest term (exp(0) = 1): callers
// that need an exact 0 (masked keys) select it themselves.
static inline float exp_nonpos(float x) {
  return fastmath_detail::exp_range(x < -87.0f ? -87.0f : x);  // not std::max: its by-reference temporary stops vectorisation
}

// The same on 8 lanes in GCC vector types, for loops GCC leaves scalar (a clamp before a float-to-int conversion
// kept a branch in every scalar form tried), the clamp a lane select.
static inline f32x8 exp_nonpos8(f32x8 x) {
  const f32x8 lo = f32x8{} - 87.0f;
  return fastmath_detail::exp_range(x < lo ? lo : x);
}

}  // namespace mcprl
