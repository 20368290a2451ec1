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

}  // namespace mcprl
