#include "common.h"

#include <sys/mman.h>

#include <cstring>

namespace mcprl {

// Buffers of 1 MiB or more (weights, run states, every KV cache) get an anonymous mapping of their own and are
// unmapped when released, so their memory goes back to the system at once. Through malloc it would not: glibc
// raises its mmap threshold to the size of each mapped block it frees, so after the first KV cache is freed the
// next ones come from its heaps, where the holes left by caches of other sizes (and of other threads' arenas)
// keep a long-running server's resident memory creeping up (issue 12 §3, bench/serve-rss.bench.ts). The mapping
// is zero-filled by the kernel and commits a page only when it is first written, so a cache's unused capacity
// costs no memory either.
constexpr size_t kMapBytes = size_t(1) << 20;

static size_t buffer_bytes(size_t n, size_t elem) { return ((n * elem) + 63) / 64 * 64; }

template <typename T>
void AlignedBuffer<T>::allocate(size_t n, const Allocator* w) {
  release();
  where = w;
  if (n == 0) return;
  size_t bytes = buffer_bytes(n, sizeof(T));
  void* p = nullptr;
  if (where) {
    p = where->alloc(bytes);
  } else if (bytes >= kMapBytes) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) FAIL("out of memory mapping " + std::to_string(bytes) + " bytes");
  } else {
    p = std::aligned_alloc(64, bytes);
    if (!p) FAIL("out of memory allocating " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, bytes);
  }
  data = static_cast<T*>(p);
  size = n;
}

template <typename T>
void AlignedBuffer<T>::release() {
  if (data) {
    size_t bytes = buffer_bytes(size, sizeof(T));
    if (where) where->release(data, bytes);
    else if (bytes >= kMapBytes) munmap(data, bytes);
    else std::free(data);
  }
  data = nullptr;
  size = 0;
}

template struct AlignedBuffer<float>;
template struct AlignedBuffer<uint16_t>;
template struct AlignedBuffer<int32_t>;
template struct AlignedBuffer<uint32_t>;

}  // namespace mcprl
