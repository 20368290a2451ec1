#include "common.h"

#include <cstring>

namespace mcprl {

void FloatBuffer::allocate(size_t n) {
  release();
  if (n == 0) return;
  size_t bytes = ((n * sizeof(float)) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) FAIL("out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, bytes);
  data = static_cast<float*>(p);
  size = n;
}

void HalfBuffer::allocate(size_t n) {
  release();
  if (n == 0) return;
  size_t bytes = ((n * sizeof(uint16_t)) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) FAIL("out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, bytes);
  data = static_cast<uint16_t*>(p);
  size = n;
}

}  // namespace mcprl
