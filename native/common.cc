#include "common.h"

#include <cstring>

namespace mcprl {

template <typename T>
void AlignedBuffer<T>::allocate(size_t n) {
  release();
  if (n == 0) return;
  size_t bytes = ((n * sizeof(T)) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) FAIL("out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, bytes);
  data = static_cast<T*>(p);
  size = n;
}

template struct AlignedBuffer<float>;
template struct AlignedBuffer<uint16_t>;

}  // namespace mcprl
