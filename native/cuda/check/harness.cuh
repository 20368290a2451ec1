// The op check's harness (mcprl-cuda-check, check_main.cu): seeded host data, device buffers, the comparison and
// its JSON line, device timing, the dump for the PyTorch oracle; and the cases, by file.
#pragma once
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../../kernels/gemm.h"
#include "../../ops/attention.h"
#include "../../ops/embedding.h"
#include "../../ops/linear.h"
#include "../../ops/lm_head.h"
#include "../../ops/rmsnorm.h"
#include "../../ops/rope.h"
#include "../../ops/swiglu.h"
#include "../../train/optim.h"
#include "../cuda_common.cuh"
#include "../ops.h"

namespace cuda_check {

using namespace mcprl;
using std::vector;

// The run's options (check_main.cu) and its count of failed figures.
inline bool g_quick = false;
inline bool g_cpu_only = false;  // --cpu-dump
inline std::string g_dump;  // empty: no dump
inline int g_failed = 0;

// ---- host data
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  vector<float> uniform(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
  }
  int below(int n) { return (int)(g() % (uint64_t)n); }
};

inline vector<uint16_t> to_bf16(const vector<float>& v) {
  vector<uint16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}

// ---- device buffers (poisoned with NaN bytes when allocated without data, so an unwritten output shows)
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)));
    CUDA_CHECK(cudaMemset(p, 0xff, std::max<size_t>(1, n) * sizeof(T)));
  }
  explicit Dev(const vector<T>& h) : n(h.size()) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)));
    if (n) CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  vector<T> get() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    vector<T> h(n);
    if (n) CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

// ---- comparison and reporting
struct Err {
  double max_abs = 0, ref_max = 0, rel = 0;
  bool finite = true;
};

inline Err compare(const vector<float>& ref, const vector<float>& got) {
  Err e;
  if (ref.size() != got.size()) { e.finite = false; return e; }
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(ref[i])) e.finite = false;
    e.max_abs = std::max(e.max_abs, (double)std::fabs(got[i] - ref[i]));
    e.ref_max = std::max(e.ref_max, (double)std::fabs(ref[i]));
  }
  e.rel = e.max_abs / std::max(e.ref_max, 1e-30);
  return e;
}

struct Report {
  std::string figure;
  double tol;
  std::string extra;  // more JSON fields, each starting with a comma
  vector<std::pair<std::string, Err>> errs;
  void add(const std::string& name, const vector<float>& ref, const vector<float>& got) {
    errs.push_back({name, compare(ref, got)});
  }
  void print() {
    bool ok = !errs.empty();
    std::string t;
    for (auto& [name, e] : errs) {
      const bool good = e.finite && e.rel <= tol;
      ok = ok && good;
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s\"%s\":{\"max_abs\":%.3e,\"rel\":%.3e%s}", t.empty() ? "" : ",", name.c_str(),
                    e.max_abs, e.rel, e.finite ? "" : ",\"nonfinite\":true");
      t += buf;
    }
    if (!ok) ++g_failed;
    std::printf("{\"figure\":\"%s\",\"ok\":%s,\"tol\":%.0e,\"tensors\":{%s}%s}\n", figure.c_str(), ok ? "true" : "false",
                tol, t.c_str(), extra.c_str());
    std::fflush(stdout);
  }
};

// A string as a JSON string's contents (error messages may quote code).
inline std::string json_escape(const std::string& in) {
  std::string o;
  for (char ch : in) {
    if (ch == '"' || ch == '\\') o += '\\';
    if ((unsigned char)ch < 0x20) { o += ' '; continue; }
    o += ch;
  }
  return o;
}

inline std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Times fn on the device: one warm-up call, then the median of `reps` timed calls, in milliseconds.
inline double time_ms(const std::function<void()>& fn, int reps = 5) {
  fn();
  CUDA_CHECK(cudaDeviceSynchronize());
  vector<double> t;
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a));
    fn();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// ---- dump for the PyTorch oracle: DIR/<case>/<tensor>.bin + meta.json
struct Dump {
  std::string dir, meta;
  bool on;
  // An empty name: this case is not dumped.
  Dump(const std::string& name, const std::string& op) : on(!g_dump.empty() && !name.empty()) {
    if (!on) return;
    dir = g_dump + "/" + name;
    mkdir(g_dump.c_str(), 0755);
    mkdir(dir.c_str(), 0755);
    meta = "{\"case\":\"" + name + "\",\"op\":\"" + op + "\",\"tensors\":{";
  }
  template <typename T>
  void tensor(const std::string& name, const char* dtype, const vector<T>& v, const vector<long>& shape) {
    if (!on) return;
    std::ofstream f(dir + "/" + name + ".bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), (std::streamsize)(v.size() * sizeof(T)));
    std::string s;
    for (long d : shape) s += (s.empty() ? "" : ",") + std::to_string(d);
    if (meta.back() != '{') meta += ",";
    meta += "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + s + "]}";
  }
  void f32(const std::string& n, const vector<float>& v, const vector<long>& s) { tensor(n, "f32", v, s); }
  void i32(const std::string& n, const vector<int32_t>& v, const vector<long>& s) { tensor(n, "i32", v, s); }
  void bf16(const std::string& n, const vector<uint16_t>& v, const vector<long>& s) { tensor(n, "bf16", v, s); }
  // params: a JSON object's body, e.g. "\"H\":16,\"D\":128"
  void finish(const std::string& params) {
    if (!on) return;
    std::ofstream(dir + "/meta.json") << meta << "},\"params\":{" << params << "}}\n";
  }
};

inline int cpu_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// ---- the cases
// check_ops.cu: each op but attention and the GEMM, forward and backward where it has one
void check_embedding();
void check_rmsnorm(const char* name, int N, int C);
void check_rope();
void check_swiglu();
void check_linear_lora();
void check_lm_head(const std::string& name, int N, int C, int V, int chunk, bool bf16, double tol, bool dump);
void check_adamw();
// check_attention.cu
void check_attention(const std::string& name, const vector<int>& lens, int H, int Hkv, int D, bool dump);
void check_attention_generation();
// check_gemm.cu
void check_gemm_paths();
void bench_gemm(int n);

}  // namespace cuda_check
