// cpu-staged (backend.h): the CPU ops on memory that host code cannot touch, so that a CPU run exercises the
// orchestration a GPU run needs — every buffer from the backend's `memory`, every host<->backend move through
// upload/download — and a host access of backend memory fails at once instead of reading a device pointer.
//
// Two ranges of address space of one size: the backend's addresses, reserved PROT_NONE and never opened, are what
// `memory` hands out (page-aligned, never reused); the same offsets in a second, readable range hold the bytes.
// Each table entry checks that every tensor it is handed lies in the first range (a host array handed to an op,
// which on CUDA would be a wild device pointer, is an EngineError naming the op), translates it to the second, and
// runs the CPU op there: no system call per op, and the same arithmetic as the CPU backend. Any other access of a
// backend address faults; the fault is reported on stderr as host code touching backend memory, then the process
// dies. A freed block's pages go back with MADV_DONTNEED.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"

namespace mcprl {

namespace {

constexpr size_t kArenaBytes = size_t(1) << 40;  // address space only (MAP_NORESERVE); pages exist once touched
constexpr size_t kPage = 4096;

struct Arena {
  char* base = nullptr;  // the backend's addresses (PROT_NONE)
  char* bytes = nullptr; // where they are held (read/write)
  size_t next = 0;       // bump offset
  std::mutex mu;
  struct sigaction prev {};
};

Arena& arena();

bool in_arena(const void* p) {
  const Arena& a = arena();
  return p >= a.base && p < a.base + kArenaBytes;
}

void on_fault(int sig, siginfo_t* si, void* ctx) {
  Arena& a = arena();
  if (in_arena(si->si_addr)) {
    char msg[256];
    const int n = std::snprintf(msg, sizeof msg,
                                "mcprl cpu-staged: host code touched backend memory at %p outside the backend's entries "
                                "(a missing upload/download)\n",
                                si->si_addr);
    if (n > 0) (void)!write(2, msg, (size_t)n);
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  // Not ours (V8's WebAssembly trap handler, or a real crash): the handler that was there before.
  if (a.prev.sa_flags & SA_SIGINFO) {
    a.prev.sa_sigaction(sig, si, ctx);
  } else if (a.prev.sa_handler != SIG_IGN && a.prev.sa_handler != SIG_DFL) {
    a.prev.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

Arena& arena() {
  static Arena* a = [] {
    auto* r = new Arena;
    void* p = mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void* q = mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED || q == MAP_FAILED) FAIL("cpu-staged: cannot reserve the backend's address range");
    r->base = static_cast<char*>(p);
    r->bytes = static_cast<char*>(q);
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &r->prev);
    return r;
  }();
  return *a;
}

size_t pages(size_t bytes) { return (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage; }

void* staged_alloc(size_t bytes) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  const size_t n = pages(bytes);
  if (a.next + n > kArenaBytes) throw EngineError("cpu-staged: the backend's address range is used up");
  void* p = a.base + a.next;  // its bytes are fresh pages: zero
  a.next += n;
  return p;
}

void staged_release(void* p, size_t bytes) {
  if (!p) return;
  Arena& a = arena();
  madvise(a.bytes + (static_cast<char*>(p) - a.base), pages(bytes), MADV_DONTNEED);
}

const Allocator kStagedMemory = {staged_alloc, staged_release};

// Every tensor argument must be backend memory (or null): its bytes' address. Host-side metadata (attention
// segments, copy lists, upload/download's host side) is checked by the entries that take it.
template <typename T>
T* dev(const char* op, T* p) {
  if (!p) return p;
  if (!in_arena(p)) throw EngineError(std::string("cpu-staged: ") + op + " was handed a host pointer as a tensor");
  const Arena& a = arena();
  return reinterpret_cast<T*>(a.bytes + (reinterpret_cast<const char*>(p) - a.base));
}
WeightRef dev(const char* op, WeightRef w) {
  w.data = dev(op, w.data);
  return w;
}
LoraView dev(const char* op, const LoraView& l) {
  LoraView r = l;
  r.A = dev(op, l.A);
  r.B = dev(op, l.B);
  return r;
}
template <typename T>
const T* host(const char* op, const T* p) {
  if (p && in_arena(p)) throw EngineError(std::string("cpu-staged: ") + op + " was handed backend memory as its host side");
  return p;
}

const Backend& cpu() { return cpu_backend(); }

}  // namespace

// The entries, in a namespace of their own (their names are the ops').
namespace staged_ops {

#define E(name) static const char* op = #name;
#define D(x) dev(op, x)

void gemm(bool tA, bool tB, int M, int N, int K, float al, const float* A, int lda, const float* B, int ldb, float be,
          float* C, int ldc) {
  E(gemm);
  cpu().gemm(tA, tB, M, N, K, al, D(A), lda, D(B), ldb, be, D(C), ldc);
}
void gemm_w(bool tW, int M, int N, int K, float al, const float* A, int lda, WeightRef W, int ldw, float be, float* C,
            int ldc) {
  E(gemm_w);
  cpu().gemm_w(tW, M, N, K, al, D(A), lda, D(W), ldw, be, D(C), ldc);
}
void embedding_forward(float* out, const int32_t* ids, WeightRef wte, int T, int C) {
  E(embedding_forward);
  cpu().embedding_forward(D(out), D(ids), D(wte), T, C);
}
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
  E(rmsnorm_forward);
  cpu().rmsnorm_forward(D(out), D(rstd), D(x), D(w), N, C, eps);
}
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int N, int C) {
  E(rmsnorm_backward);
  cpu().rmsnorm_backward(D(dx), D(dw), D(dout), D(x), D(w), D(rstd), N, C);
}
void rope_forward(float* x, const int32_t* pos, const float* inv_freq, int T, int H, int D_) {
  E(rope_forward);
  cpu().rope_forward(D(x), D(pos), D(inv_freq), T, H, D_);
}
void rope_backward(float* dx, const int32_t* pos, const float* inv_freq, int T, int H, int D_) {
  E(rope_backward);
  cpu().rope_backward(D(dx), D(pos), D(inv_freq), T, H, D_);
}
void attention_forward(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H, int Hkv,
                       int D_) {
  E(attention_forward);
  host(op, segs);  // host metadata whose k/v point into the backend's memory
  std::vector<AttnSegment> at(segs, segs + nseg);
  for (AttnSegment& g : at) g.k = D(g.k), g.v = D(g.v);
  cpu().attention_forward(D(out), D(lse), D(q), at.data(), nseg, H, Hkv, D_);
}
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* cu, int nseq, int H, int Hkv,
                        int D_) {
  E(attention_backward);
  // The sequence offsets are host metadata (native/cuda/README.md).
  cpu().attention_backward(D(dq), D(dk), D(dv), D(dout), D(q), D(k), D(v), D(out), D(lse), host(op, cu), nseq, H, Hkv,
                           D_);
}
void swiglu_forward(float* out, const float* gate, const float* up, long N) {
  E(swiglu_forward);
  cpu().swiglu_forward(D(out), D(gate), D(up), N);
}
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long N) {
  E(swiglu_backward);
  cpu().swiglu_backward(D(dgate), D(dup), D(dout), D(gate), D(up), N);
}
void linear_forward(float* y, const float* x, WeightRef W, const float* b, int N, int in, int out) {
  E(linear_forward);
  cpu().linear_forward(D(y), D(x), D(W), D(b), N, in, out);
}
void linear_backward(float* dx, const float* dy, WeightRef W, int N, int in, int out) {
  E(linear_backward);
  cpu().linear_backward(D(dx), D(dy), D(W), N, in, out);
}
void lora_forward(float* y, float* xa, const float* x, const LoraView& l, int N, int in, int out) {
  E(lora_forward);
  cpu().lora_forward(D(y), D(xa), D(x), D(l), N, in, out);
}
void lora_backward(float* dx, float* dA, float* dB, float* dh, const float* dy, const float* x, const float* xa,
                   const LoraView& l, int N, int in, int out) {
  E(lora_backward);
  cpu().lora_backward(D(dx), D(dA), D(dB), D(dh), D(dy), D(x), D(xa), D(l), N, in, out);
}
void lm_head_forward(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                     const int32_t* targets, int N, int C, int V, float* scratch, int chunk, const float* inv_temp,
                     const int32_t* mask_idx, const uint32_t* masks) {
  E(lm_head_forward);
  cpu().lm_head_forward(D(logp), D(lse), D(entropy), D(g), D(h), D(W), D(targets), N, C, V, D(scratch), chunk,
                        D(inv_temp), D(mask_idx), D(masks));
}
void lm_head_backward(float* dh, const float* dlogp, const float* g, WeightRef W, const int32_t* targets, int N, int C,
                      const float* inv_temp) {
  E(lm_head_backward);
  cpu().lm_head_backward(D(dh), D(dlogp), D(g), D(W), D(targets), N, C, D(inv_temp));
}
void logits_forward(float* z, const float* h, WeightRef W, int N, int C, int V) {
  E(logits_forward);
  cpu().logits_forward(D(z), D(h), D(W), N, C, V);
}
void copy(void* dst, const void* src, size_t bytes) {
  E(copy);
  cpu().copy(D(static_cast<char*>(dst)), D(static_cast<const char*>(src)), bytes);
}
void copy_rows(const RowCopy* c, int n) {
  E(copy_rows);
  host(op, c);
  std::vector<RowCopy> at(c, c + n);
  for (RowCopy& r : at) r.dst = D(r.dst), r.src = D(r.src);
  cpu().copy_rows(at.data(), n);
}
void upload(void* dst, const void* h, size_t bytes) {
  E(upload);
  cpu().upload(D(static_cast<char*>(dst)), host(op, static_cast<const char*>(h)), bytes);
}
void download(void* h, const void* src, size_t bytes) {
  E(download);
  host(op, static_cast<const char*>(h));
  cpu().download(h, D(static_cast<const char*>(src)), bytes);
}
void zero(void* p, size_t bytes) {
  E(zero);
  cpu().zero(D(static_cast<char*>(p)), bytes);
}
void add(float* y, const float* a, const float* b, long n) {
  E(add);
  cpu().add(D(y), D(a), D(b), n);
}
void gather_rows(float* dst, const float* src, const int32_t* rows, int M, int C) {
  E(gather_rows);
  cpu().gather_rows(D(dst), D(src), D(rows), M, C);
}
void scatter_add_rows(float* dst, const float* src, const int32_t* rows, int M, int C) {
  E(scatter_add_rows);
  cpu().scatter_add_rows(D(dst), D(src), D(rows), M, C);
}
double norm(const float* x, size_t n) {
  E(norm);
  return cpu().norm(D(x), n);
}
void scale(float* x, float s, size_t n) {
  E(scale);
  cpu().scale(D(x), s, n);
}
void adamw(float* p, const float* g, float* m, float* v, size_t n, long step, float lr, const AdamWConfig& c) {
  E(adamw);
  cpu().adamw(D(p), D(g), D(m), D(v), n, step, lr, c);
}

#undef D
#undef E

}  // namespace staged_ops

const Backend& cpu_staged_backend() {
  static const Backend be = {
      "cpu-staged",
      staged_ops::gemm,
      staged_ops::gemm_w,
      staged_ops::embedding_forward,
      staged_ops::rmsnorm_forward,
      staged_ops::rmsnorm_backward,
      staged_ops::rope_forward,
      staged_ops::rope_backward,
      staged_ops::attention_forward,
      staged_ops::attention_backward,
      staged_ops::swiglu_forward,
      staged_ops::swiglu_backward,
      staged_ops::linear_forward,
      staged_ops::linear_backward,
      staged_ops::lora_forward,
      staged_ops::lora_backward,
      staged_ops::lm_head_forward,
      staged_ops::lm_head_backward,
      staged_ops::logits_forward,
      &kStagedMemory,
      staged_ops::copy,
      staged_ops::copy_rows,
      staged_ops::upload,
      staged_ops::download,
      staged_ops::zero,
      staged_ops::add,
      staged_ops::gather_rows,
      staged_ops::scatter_add_rows,
      staged_ops::norm,
      staged_ops::scale,
      staged_ops::adamw,
  };
  return be;
}

}  // namespace mcprl
