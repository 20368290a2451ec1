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

// Owning 64-byte-aligned float buffer: the "one flat allocation" behind each struct of named views.
struct FloatBuffer {
  float* data = nullptr;
  size_t size = 0;  // floats
  FloatBuffer() = default;
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  FloatBuffer(FloatBuffer&& o) noexcept : data(o.data), size(o.size) { o.data = nullptr; o.size = 0; }
  FloatBuffer& operator=(FloatBuffer&& o) noexcept {
    if (this != &o) { release(); data = o.data; size = o.size; o.data = nullptr; o.size = 0; }
    return *this;
  }
  ~FloatBuffer() { release(); }
  void release() { std::free(data); data = nullptr; size = 0; }
  // Allocates n floats, zero-filled. Throws EngineError when memory is exhausted.
  void allocate(size_t n);
};

// The same for 16-bit elements (bf16 / f16 weights kept as stored).
struct HalfBuffer {
  uint16_t* data = nullptr;
  size_t size = 0;  // elements
  HalfBuffer() = default;
  HalfBuffer(const HalfBuffer&) = delete;
  HalfBuffer& operator=(const HalfBuffer&) = delete;
  HalfBuffer(HalfBuffer&& o) noexcept : data(o.data), size(o.size) { o.data = nullptr; o.size = 0; }
  HalfBuffer& operator=(HalfBuffer&& o) noexcept {
    if (this != &o) { release(); data = o.data; size = o.size; o.data = nullptr; o.size = 0; }
    return *this;
  }
  ~HalfBuffer() { release(); }
  void release() { std::free(data); data = nullptr; size = 0; }
  // Allocates n elements, zero-filled. Throws EngineError when memory is exhausted.
  void allocate(size_t n);
};

}  // namespace mcprl

#define FAIL(msg) ::mcprl::fail_at(__FILE__, __LINE__, (msg))
#define CHECK(cond, msg)                                                            \
  do {                                                                              \
    if (!(cond)) ::mcprl::fail_at(__FILE__, __LINE__, std::string(msg));            \
  } while (0)
