// exp for the softmax loops over the vocabulary (V ~ 150k per row): std::exp does not vectorize here
// (glibc's vector expf needs -ffast-math), so this branch-free version does. Range reduction to
// |r| <= ln2/2 and a degree-6 Taylor polynomial: relative error ~2e-7, close to f32 rounding.
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

// exp(x) for x <= 0 (softmax terms after subtracting the row's maximum) in a form the compiler vectorises
// (Cephes expf: x = k ln2 + r, degree-6 polynomial on |r| <= ln2 / 2, relative error about 2e-7; -87 <= x keeps
// |x / ln2| far below 2^22, where the rounding trick holds). Inputs below
// -87 return exp(-87) ~ 1.6e-38 instead of denormals, far below anything that matters next to the row's largest
// term (exp(0) = 1): callers that need an exact 0 (masked keys) select it themselves.
static inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;  // not std::max: its by-reference temporary stops vectorisation
  // k = x / ln2 rounded to nearest by the 1.5 * 2^23 trick: GCC vectorises std::floor only under
  // -fno-trapping-math, and a floor left a scalar libm call per element in every softmax loop.
  const float t = x * 1.44269504088896341f;
  const float k = (t + 12582912.0f) - 12582912.0f;
  float r = x - k * 0.693359375f + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)k + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// The same on 8 lanes in GCC vector types, for loops GCC leaves scalar (a clamp before a float-to-int conversion
// kept a branch in every form tried), with the clamp as a lane select.
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
static inline f32x8 exp_nonpos8(f32x8 x) {
  const f32x8 zero = {};
  x = x < zero - 87.0f ? zero - 87.0f : x;
  const f32x8 t = x * 1.44269504088896341f;
  const f32x8 k = (t + 12582912.0f) - 12582912.0f;
  const f32x8 r = x - k * 0.693359375f + k * 2.12194440e-4f;
  f32x8 p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const i32x8 bits = (__builtin_convertvector(k, i32x8) + 127) << 23;
  return p * (f32x8)bits;
}

}  // namespace mcprl
