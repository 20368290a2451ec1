// A frozen base weight matrix as it is kept in memory: f32, or 16-bit (bf16 / f16) exactly as the checkpoint
// stores it, widened to f32 inside the products that read it (gemm_w in gemm.h, the embedding lookup, the LM
// head's backward). Widening bf16 or f16 to f32 is exact, so a 16-bit matrix and the same matrix widened at
// load give the same products up to the order of the additions; the f32 path is the oracle and is untouched.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mcprl {

enum class WDtype : uint8_t { F32 = 0, BF16 = 1, F16 = 2 };

struct WeightRef {
  const void* data = nullptr;  // (rows, cols) row-major, of `dtype` elements
  WDtype dtype = WDtype::F32;
  WeightRef() = default;
  WeightRef(const float* p) : data(p), dtype(WDtype::F32) {}  // NOLINT: f32 pointers convert implicitly
  WeightRef(const uint16_t* p, WDtype t) : data(p), dtype(t) {}
  bool is_f32() const { return dtype == WDtype::F32; }
  const float* f32() const { return static_cast<const float*>(data); }
  const uint16_t* u16() const { return static_cast<const uint16_t*>(data); }
};

// W shifted by `elems` elements of its own dtype (a block of rows of a frozen matrix).
inline WeightRef weight_offset(WeightRef w, size_t elems) {
  if (w.is_f32()) return WeightRef(w.f32() + elems);
  return WeightRef(w.u16() + elems, w.dtype);
}

// dst (n) = elements [off, off + n) of w, widened to f32. Serial (callers parallelise over rows).
void widen(float* dst, WeightRef w, size_t off, size_t n);
// Rounds f32 to bf16, to nearest with ties to even (NaN stays NaN).
uint16_t f32_to_bf16(float x);
const char* wdtype_name(WDtype t);  // "f32" | "bf16" | "f16"

}  // namespace mcprl
