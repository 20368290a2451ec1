// Shared helpers for the native engine: error checks that carry file:line, aligned buffers.
//
// Error rule: native code fails fast with CHECK/FAIL, which throw mcprl::EngineError (a C++ exception).
// The N-API layer (addon.cc) catches every exception and turns it into a thrown JS Error, so the Node
// process never aborts. Never CHECK inside an OpenMP parallel region: an exception escaping a parallel
// region terminates the process. Validate inputs before the parallel loop instead.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mcprl {

struct EngineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail_at(const char* file, int line, const std::string& msg) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  throw EngineError(msg + " (" + base + ":" + std::to_string(line) + ")");
}

// Memory that is not the host's (a GPU's): how a buffer there is taken and given back. A buffer without one
// lives in host memory, which is where the CPU backend's tensors are.
struct Allocator {
  void* (*alloc)(size_t bytes);  // zero-filled; throws EngineError when memory is exhausted
  void (*release)(void* p, size_t bytes);  // bytes: as allocated
};

// Owning 64-byte-aligned buffer of T: the "one flat allocation" behind each struct of named views.
template <typename T>
struct AlignedBuffer {
  T* data = nullptr;
  size_t size = 0;  // elements
  const Allocator* where = nullptr;  // null: host memory
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : data(o.data), size(o.size), where(o.where) { o.data = nullptr; o.size = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) { release(); data = o.data; size = o.size; where = o.where; o.data = nullptr; o.size = 0; }
    return *this;
  }
  ~AlignedBuffer() { release(); }
  void release();
  // Allocates n elements, zero-filled, in host memory or (`where`) a backend's. Throws EngineError when memory
  // is exhausted.
  void allocate(size_t n, const Allocator* where = nullptr);
};

using FloatBuffer = AlignedBuffer<float>;    // weights, activations, optimiser state
using HalfBuffer = AlignedBuffer<uint16_t>;  // bf16 / f16 weights kept as stored
using IntBuffer = AlignedBuffer<int32_t>;    // token ids, positions, rows, where a backend's ops read them
using MaskBuffer = AlignedBuffer<uint32_t>;  // token-mask bitsets, likewise

}  // namespace mcprl

#define FAIL(msg) ::mcprl::fail_at(__FILE__, __LINE__, (msg))
#define CHECK(cond, msg)                                                            \
  do {                                                                              \
    if (!(cond)) ::mcprl::fail_at(__FILE__, __LINE__, std::string(msg));            \
  } while (0)
