// Widening of 16-bit weights (see weight.h).
#include "weight.h"

#include <cstring>

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "safetensors.h"

namespace mcprl {

void widen(float* dst, WeightRef w, size_t off, size_t n) {
  if (w.is_f32()) {
    std::memcpy(dst, w.f32() + off, n * sizeof(float));
    return;
  }
  const uint16_t* __restrict s = w.u16() + off;
  if (w.dtype == WDtype::BF16) {
    // bf16 is the top half of an f32: shift into place (the compiler vectorises this loop).
    uint32_t* __restrict d = reinterpret_cast<uint32_t*>(dst);
#pragma omp simd
    for (size_t i = 0; i < n; ++i) d[i] = (uint32_t)s[i] << 16;
    return;
  }
  size_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
}

uint16_t f32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

const char* wdtype_name(WDtype t) { return t == WDtype::BF16 ? "bf16" : t == WDtype::F16 ? "f16" : "f32"; }

}  // namespace mcprl
