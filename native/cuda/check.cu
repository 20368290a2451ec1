// The CUDA backend's standalone check (no Node, no N-API): for every op, seeded random inputs go through the
// CPU op (native/ops/*.cc, the oracle the CPU tests already hold to finite differences) and the CUDA op, and
// the forward outputs and backward gradients are compared. One JSON line per case on stdout:
//   {"figure":"cuda.op.<op>.<case>","ok":true,"tol":1e-4,"tensors":{"out":{"max_abs":..,"rel":..},...},...}
// rel = max |cuda − cpu| / max |cpu| over the tensor (a scale-free error that a tensor with small entries does
// not inflate). Tolerances, stated per case:
//   - f32 paths (rmsnorm, rope, swiglu, attention, the LoRA products, AdamW, f32 LM head): 1e-4 — f32 rounding
//     in another order of additions (and fused multiply-adds) lands near 1e-6;
//   - paths through a bf16 weight (linear, LM head over bf16): 1e-2 — the CUDA op rounds the f32 activation to
//     bf16 for the tensor cores (relative error 2^-9 per operand, about 4e-3 at worst per element, much less
//     after the sum), where the CPU op widens the weight and keeps the activation in f32;
//   - the embedding: 0 (widening bf16 is exact).
// Then GEMM figures: bf16 x bf16 -> f32 at 4096^3 in TFLOP/s through cuBLAS and through the fallback kernel.
// Exit status: 0 all ok, 1 a check failed, 2 no CUDA device (one JSON line says so).
//
// --dump DIR writes the inputs and both outputs of the cases marked for it (raw little-endian .bin files and
// a meta.json per case) for scripts/device-check.py, which recomputes them with PyTorch on the GPU.
// --quick: small shapes only (a smoke run).
// --cpu-dump DIR: no GPU needed: only the CPU side of the dumped cases (quick shapes), so the PyTorch oracle's
// formulas can be checked against the CPU ops on a machine without a GPU (scripts/device-check.sh's dry mode).
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

#include "../kernels/gemm.h"
#include "../ops/attention.h"
#include "../ops/embedding.h"
#include "../ops/linear.h"
#include "../ops/lm_head.h"
#include "../ops/rmsnorm.h"
#include "../ops/rope.h"
#include "../ops/swiglu.h"
#include "../train/optim.h"
#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
// weight.cc widens f16 through safetensors.cc's f16_to_f32; the check does not link the safetensors reader
// (it needs nlohmann-json, absent on the GPU machine), so the conversion comes from CUDA's own header here.
float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
}  // namespace mcprl

using namespace mcprl;
using std::vector;

namespace {

bool g_quick = false;
bool g_cpu_only = false;  // --cpu-dump
std::string g_dump;  // empty: no dump
int g_failed = 0;

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

vector<uint16_t> to_bf16(const vector<float>& v) {
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

Err compare(const vector<float>& ref, const vector<float>& got) {
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
std::string json_escape(const std::string& in) {
  std::string o;
  for (char ch : in) {
    if (ch == '"' || ch == '\\') o += '\\';
    if ((unsigned char)ch < 0x20) { o += ' '; continue; }
    o += ch;
  }
  return o;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Times fn on the device: one warm-up call, then the median of `reps` timed calls, in milliseconds.
double time_ms(const std::function<void()>& fn, int reps = 5) {
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

int cpu_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// ================================================================ cases

void check_embedding() {
  Rng r(1);
  const int V = 1000, C = 1024, T = 300;
  auto wte = to_bf16(r.uniform((size_t)V * C, -1, 1));
  vector<int32_t> ids(T);
  for (auto& x : ids) x = r.below(V);
  vector<float> ref((size_t)T * C);
  embedding_forward(ref.data(), ids.data(), WeightRef(wte.data(), WDtype::BF16), T, C);
  Dev<uint16_t> dw(wte);
  Dev<int32_t> di(ids);
  Dev<float> out((size_t)T * C);
  cuda::embedding_forward(out.p, di.p, WeightRef(dw.p, WDtype::BF16), T, C);
  Report rep{"cuda.op.embedding.bf16", 0.0};
  rep.add("out", ref, out.get());
  rep.print();
}

void check_rmsnorm(const char* name, int N, int C) {
  Rng r(2 + N);
  auto x = r.uniform((size_t)N * C, -2, 2), w = r.uniform(C, 0.5f, 1.5f), dout = r.uniform((size_t)N * C, -1, 1);
  auto dw0 = r.uniform(C, -1, 1);  // dw accumulates: start from something that is not zero
  vector<float> out((size_t)N * C), rstd(N), dx((size_t)N * C), dw = dw0;
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  Dump d(std::string("rmsnorm_") + name, "rmsnorm");
  d.f32("x", x, {N, C}); d.f32("w", w, {C}); d.f32("dout", dout, {N, C}); d.f32("dw0", dw0, {C});
  d.f32("cpu.out", out, {N, C}); d.f32("cpu.dx", dx, {N, C}); d.f32("cpu.dw", dw, {C});
  if (g_cpu_only) return d.finish("\"eps\":1e-6");
  Dev<float> gx(x), gw(w), gd(dout), gdw(dw0), gout((size_t)N * C), grstd(N), gdx((size_t)N * C);
  cuda::rmsnorm_forward(gout.p, grstd.p, gx.p, gw.p, N, C, 1e-6f);
  cuda::rmsnorm_backward(gdx.p, gdw.p, gd.p, gx.p, gw.p, grstd.p, N, C);
  Report rep{std::string("cuda.op.rmsnorm.") + name, 1e-4};
  rep.add("out", out, gout.get());
  rep.add("rstd", rstd, grstd.get());
  rep.add("dx", dx, gdx.get());
  rep.add("dw", dw, gdw.get());
  rep.print();
  d.f32("cuda.out", gout.get(), {N, C}); d.f32("cuda.dx", gdx.get(), {N, C}); d.f32("cuda.dw", gdw.get(), {C});
  d.finish("\"eps\":1e-6");
}

void check_rope() {
  Rng r(3);
  const int T = g_quick ? 100 : 2048, H = 8, D = 128;
  vector<int32_t> pos(T);
  // Packed sequences: positions restart at 0 at each boundary (every 700 rows here).
  for (int t = 0; t < T; ++t) pos[t] = t % 700;
  vector<float> inv(D / 2);
  rope_inv_freq(inv.data(), D, 1e6f, RopeScaling{0, 1, 1, 1, 0});
  auto x = r.uniform((size_t)T * H * D, -1, 1), g = r.uniform((size_t)T * H * D, -1, 1);
  vector<float> y = x, dx = g;
  rope_forward(y.data(), pos.data(), inv.data(), T, H, D);
  rope_backward(dx.data(), pos.data(), inv.data(), T, H, D);
  Dump d("rope", "rope");
  d.f32("x", x, {T, H, D}); d.f32("dout", g, {T, H, D}); d.i32("pos", pos, {T}); d.f32("inv_freq", inv, {D / 2});
  d.f32("cpu.out", y, {T, H, D}); d.f32("cpu.dx", dx, {T, H, D});
  if (g_cpu_only) return d.finish("");
  Dev<float> gy(x), gdx(g), ginv(inv);
  Dev<int32_t> gpos(pos);
  cuda::rope_forward(gy.p, gpos.p, ginv.p, T, H, D);
  cuda::rope_backward(gdx.p, gpos.p, ginv.p, T, H, D);
  Report rep{"cuda.op.rope.T" + std::to_string(T), 1e-4};
  rep.add("out", y, gy.get());
  rep.add("dx", dx, gdx.get());
  rep.print();
  d.f32("cuda.out", gy.get(), {T, H, D}); d.f32("cuda.dx", gdx.get(), {T, H, D});
  d.finish("");
}

void check_swiglu() {
  Rng r(4);
  const long N = g_quick ? 4096 : (1L << 22);
  auto gate = r.uniform(N, -6, 6), up = r.uniform(N, -2, 2), dout = r.uniform(N, -1, 1);
  vector<float> out(N), dg(N), du(N);
  swiglu_forward(out.data(), gate.data(), up.data(), N);
  swiglu_backward(dg.data(), du.data(), dout.data(), gate.data(), up.data(), N);
  Dev<float> a(gate), b(up), c(dout), o(N), x(N), y(N);
  cuda::swiglu_forward(o.p, a.p, b.p, N);
  cuda::swiglu_backward(x.p, y.p, c.p, a.p, b.p, N);
  Report rep{"cuda.op.swiglu", 1e-4};
  rep.add("out", out, o.get());
  rep.add("dgate", dg, x.get());
  rep.add("dup", du, y.get());
  rep.print();
}

void check_linear_lora() {
  Rng r(5);
  const int N = 300, in = 1024, out = 768, rank = 16;
  const float scale = 2.0f;
  auto W = to_bf16(r.uniform((size_t)out * in, -0.05f, 0.05f));
  auto b = r.uniform(out, -1, 1), x = r.uniform((size_t)N * in, -1, 1), dy = r.uniform((size_t)N * out, -1, 1);
  auto A = r.uniform((size_t)rank * in, -0.05f, 0.05f), B = r.uniform((size_t)out * rank, -0.05f, 0.05f);
  auto dA0 = r.uniform(A.size(), -1, 1), dB0 = r.uniform(B.size(), -1, 1);
  const WeightRef Wh(W.data(), WDtype::BF16);
  // CPU: base then LoRA, as the model runs them.
  vector<float> y((size_t)N * out), xa((size_t)N * rank), dx((size_t)N * in), dh((size_t)N * rank), dA = dA0, dB = dB0;
  linear_forward(y.data(), x.data(), Wh, b.data(), N, in, out);
  vector<float> y_base = y;
  LoraView lv{A.data(), B.data(), rank, scale};
  lora_forward(y.data(), xa.data(), x.data(), lv, N, in, out);
  linear_backward(dx.data(), dy.data(), Wh, N, in, out);
  vector<float> dx_base = dx;
  lora_backward(dx.data(), dA.data(), dB.data(), dh.data(), dy.data(), x.data(), xa.data(), lv, N, in, out);
  Dump d("linear_lora", "linear_lora");
  d.bf16("W", W, {out, in}); d.f32("b", b, {out}); d.f32("x", x, {N, in}); d.f32("dy", dy, {N, out});
  d.f32("A", A, {rank, in}); d.f32("B", B, {out, rank}); d.f32("dA0", dA0, {rank, in}); d.f32("dB0", dB0, {out, rank});
  d.f32("cpu.y", y, {N, out}); d.f32("cpu.dx", dx, {N, in}); d.f32("cpu.dA", dA, {rank, in}); d.f32("cpu.dB", dB, {out, rank});
  const std::string params = "\"scale\":" + fmt("%.9g", scale);
  if (g_cpu_only) return d.finish(params);
  // CUDA
  Dev<uint16_t> gW(W);
  Dev<float> gb(b), gx(x), gdy(dy), gA(A), gB(B), gdA(dA0), gdB(dB0), gy((size_t)N * out), gxa((size_t)N * rank),
      gdx((size_t)N * in), gdh((size_t)N * rank);
  const WeightRef gWh(gW.p, WDtype::BF16);
  cuda::linear_forward(gy.p, gx.p, gWh, gb.p, N, in, out);
  auto gy_base = gy.get();
  LoraView glv{gA.p, gB.p, rank, scale};
  cuda::linear_backward(gdx.p, gdy.p, gWh, N, in, out);
  auto gdx_base = gdx.get();
  Report lin{"cuda.op.linear.bf16", 1e-2};
  lin.add("y", y_base, gy_base);
  lin.add("dx", dx_base, gdx_base);
  lin.print();
  // The LoRA products alone are f32: feed the CUDA op the CPU's base results so only they differ.
  Dev<float> gy2(y_base), gdx2(dx_base);
  cuda::lora_forward(gy2.p, gxa.p, gx.p, glv, N, in, out);
  cuda::lora_backward(gdx2.p, gdA.p, gdB.p, gdh.p, gdy.p, gx.p, gxa.p, glv, N, in, out);
  Report lo{"cuda.op.lora.f32.r16", 1e-4};
  lo.add("y", y, gy2.get());
  lo.add("xa", xa, gxa.get());
  lo.add("dx", dx, gdx2.get());
  lo.add("dA", dA, gdA.get());
  lo.add("dB", dB, gdB.get());
  lo.add("dh", dh, gdh.get());
  lo.print();
  // The whole CUDA chain (base + LoRA on the CUDA base results) for the torch comparison.
  Dev<float> gy3((size_t)N * out), gdx3((size_t)N * in), gdA3(dA0), gdB3(dB0);
  cuda::linear_forward(gy3.p, gx.p, gWh, gb.p, N, in, out);
  cuda::lora_forward(gy3.p, gxa.p, gx.p, glv, N, in, out);
  cuda::linear_backward(gdx3.p, gdy.p, gWh, N, in, out);
  cuda::lora_backward(gdx3.p, gdA3.p, gdB3.p, gdh.p, gdy.p, gx.p, gxa.p, glv, N, in, out);
  d.f32("cuda.y", gy3.get(), {N, out}); d.f32("cuda.dx", gdx3.get(), {N, in});
  d.f32("cuda.dA", gdA3.get(), {rank, in}); d.f32("cuda.dB", gdB3.get(), {out, rank});
  d.finish(params);
}

// Packed sequences of the given lengths: forward and backward, CPU vs CUDA, timed on the device.
void check_attention(const std::string& name, const vector<int>& lens, int H, int Hkv, int D, bool dump) {
  Rng r(6 + H * 7 + Hkv * 13 + D);
  vector<int> cu{0};
  for (int n : lens) cu.push_back(cu.back() + n);
  const int T = cu.back(), nseq = (int)lens.size();
  const size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D;
  auto q = r.uniform(nq, -2, 2), k = r.uniform(nk, -2, 2), v = r.uniform(nk, -1, 1), dout = r.uniform(nq, -1, 1);
  vector<AttnSegment> segs;
  for (int s = 0; s < nseq; ++s) segs.push_back({cu[s], lens[s], 0, k.data() + (size_t)cu[s] * Hkv * D, v.data() + (size_t)cu[s] * Hkv * D});
  vector<float> out(nq), lse((size_t)T * H), dq(nq), dk(nk), dv(nk);
  auto t0 = std::chrono::steady_clock::now();
  attention_forward(out.data(), lse.data(), q.data(), segs.data(), nseq, H, Hkv, D);
  attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(),
                     cu.data(), nseq, H, Hkv, D);
  const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Dump d(dump ? "attention_" + name : std::string(), "attention");
  d.f32("q", q, {T, H, D}); d.f32("k", k, {T, Hkv, D}); d.f32("v", v, {T, Hkv, D}); d.f32("dout", dout, {T, H, D});
  d.i32("cu_seqlens", vector<int32_t>(cu.begin(), cu.end()), {nseq + 1});
  d.f32("cpu.out", out, {T, H, D}); d.f32("cpu.lse", lse, {T, H}); d.f32("cpu.dq", dq, {T, H, D});
  d.f32("cpu.dk", dk, {T, Hkv, D}); d.f32("cpu.dv", dv, {T, Hkv, D});
  const std::string params = "\"H\":" + std::to_string(H) + ",\"Hkv\":" + std::to_string(Hkv) + ",\"D\":" + std::to_string(D);
  if (g_cpu_only) return d.finish(params);
  Dev<float> gq(q), gk(k), gv(v), gd(dout), go(nq), gl((size_t)T * H), gdq(nq), gdk(nk), gdv(nk);
  vector<AttnSegment> dsegs;
  for (int s = 0; s < nseq; ++s) dsegs.push_back({cu[s], lens[s], 0, gk.p + (size_t)cu[s] * Hkv * D, gv.p + (size_t)cu[s] * Hkv * D});
  auto fwd = [&] { cuda::attention_forward(go.p, gl.p, gq.p, dsegs.data(), nseq, H, Hkv, D); };
  auto bwd = [&] {
    cuda::attention_backward(gdq.p, gdk.p, gdv.p, gd.p, gq.p, gk.p, gv.p, go.p, gl.p, cu.data(), nseq, H, Hkv, D);
  };
  // The tensor-core kernels first (head_dim a multiple of 16): bf16 operands, so bf16 accuracy (2e-2); then the
  // f32 kernels, whose outputs the dump keeps for the PyTorch oracle.
  for (const bool tc : {true, false}) {
    if (tc && D % 16 != 0) continue;
    cuda::attention_set_tensor_cores(tc);
    fwd();
    bwd();
    Report rep{"cuda.op.attention." + name + (tc ? ".tc" : ""), tc ? 2e-2 : 1e-4};
    rep.add("out", out, go.get());
    rep.add("lse", lse, gl.get());
    rep.add("dq", dq, gdq.get());
    rep.add("dk", dk, gdk.get());
    rep.add("dv", dv, gdv.get());
    const double fms = time_ms(fwd), bms = time_ms(bwd);
    // Causal FLOPs: each (query, key <= query) pair costs 2D for the scores and 2D for P V (forward); the
    // backward recomputes scores and does dP, dV, dK (in dk/dv) and again scores, dP and dQ (in dq): 5x (plus 2).
    double pairs = 0;
    for (int n : lens) pairs += 0.5 * (double)n * (n + 1);
    const double fflop = pairs * H * 4.0 * D;
    rep.extra = ",\"T\":" + std::to_string(T) + ",\"H\":" + std::to_string(H) + ",\"Hkv\":" + std::to_string(Hkv) +
                ",\"D\":" + std::to_string(D) + ",\"nseq\":" + std::to_string(nseq) + ",\"fwd_ms\":" + fmt("%.3f", fms) +
                ",\"bwd_ms\":" + fmt("%.3f", bms) + ",\"fwd_tflops\":" + fmt("%.2f", fflop / fms * 1e-9) +
                ",\"bwd_tflops\":" + fmt("%.2f", 2.5 * fflop / bms * 1e-9) +
                ",\"cpu_s\":" + fmt("%.2f", cpu_s);
    rep.print();
  }
  d.f32("cuda.out", go.get(), {T, H, D}); d.f32("cuda.lse", gl.get(), {T, H});
  d.f32("cuda.dq", gdq.get(), {T, H, D}); d.f32("cuda.dk", gdk.get(), {T, Hkv, D}); d.f32("cuda.dv", gdv.get(), {T, Hkv, D});
  d.finish(params);
}

// Generation segments: queries continue a KV cache (npast > 0): a decode step (nq = 1), a prefill continuation,
// and a fresh packed sequence in the same call. Forward only (no backward over the cache).
void check_attention_generation() {
  Rng r(7);
  const int H = 8, Hkv = 2, D = 64;
  struct S { int npast, nq; };
  const vector<S> ss = {{500, 1}, {100, 37}, {0, 45}, {1023, 1}};
  vector<vector<float>> kc, vc;
  vector<AttnSegment> segs;
  int T = 0;
  for (auto s : ss) {
    kc.push_back(r.uniform((size_t)(s.npast + s.nq) * Hkv * D, -2, 2));
    vc.push_back(r.uniform((size_t)(s.npast + s.nq) * Hkv * D, -1, 1));
    T += s.nq;
  }
  auto q = r.uniform((size_t)T * H * D, -2, 2);
  vector<float> out((size_t)T * H * D), lse((size_t)T * H);
  int q0 = 0;
  for (size_t i = 0; i < ss.size(); ++i) {
    segs.push_back({q0, ss[i].nq, ss[i].npast, kc[i].data(), vc[i].data()});
    q0 += ss[i].nq;
  }
  attention_forward(out.data(), lse.data(), q.data(), segs.data(), (int)segs.size(), H, Hkv, D);
  vector<std::unique_ptr<Dev<float>>> gk, gv;
  vector<AttnSegment> dsegs = segs;
  for (size_t i = 0; i < ss.size(); ++i) {
    gk.emplace_back(new Dev<float>(kc[i]));
    gv.emplace_back(new Dev<float>(vc[i]));
    dsegs[i].k = gk.back()->p;
    dsegs[i].v = gv.back()->p;
  }
  Dev<float> gq(q), go(out.size()), gl(lse.size());
  for (const bool tc : {true, false}) {
    cuda::attention_set_tensor_cores(tc);
    cuda::attention_forward(go.p, gl.p, gq.p, dsegs.data(), (int)dsegs.size(), H, Hkv, D);
    Report rep{std::string("cuda.op.attention.generation_segments") + (tc ? ".tc" : ""), tc ? 2e-2 : 1e-4};
    rep.add("out", out, go.get());
    rep.add("lse", lse, gl.get());
    rep.print();
  }
}

void check_lm_head(const std::string& name, int N, int C, int V, int chunk, bool bf16, double tol, bool dump) {
  Rng r(8 + V);
  auto Wf = r.uniform((size_t)V * C, -0.1f, 0.1f);
  vector<uint16_t> Wb;
  if (bf16) Wb = to_bf16(Wf);
  auto h = r.uniform((size_t)N * C, -1, 1), dlogp = r.uniform(N, -1, 1);
  vector<int32_t> targets(N), mask_idx(N);
  vector<float> inv_temp(N);
  const size_t words = ((size_t)V + 31) / 32;
  vector<uint32_t> masks(2 * words);
  for (auto& w : masks) w = (uint32_t)r.g() | 0x11111111u;  // about 5/8 of the tokens allowed in each set
  for (int n = 0; n < N; ++n) {
    targets[n] = r.below(V);
    inv_temp[n] = n % 3 == 0 ? 1.0f : 1.0f / 0.7f;  // rows at temperature 1 and at 0.7
    mask_idx[n] = n % 5 == 0 ? 0 : n % 7 == 0 ? 1 : -1;  // a few constrained rows
  }
  const WeightRef Wh = bf16 ? WeightRef(Wb.data(), WDtype::BF16) : WeightRef(Wf.data());
  vector<float> logp(N), lse(N), ent(N), g((size_t)N * C), dh((size_t)N * C), scratch((size_t)chunk * V);
  auto t0 = std::chrono::steady_clock::now();
  lm_head_forward(logp.data(), lse.data(), ent.data(), g.data(), h.data(), Wh, targets.data(), N, C, V, scratch.data(),
                  chunk, inv_temp.data(), mask_idx.data(), masks.data());
  lm_head_backward(dh.data(), dlogp.data(), g.data(), Wh, targets.data(), N, C, inv_temp.data());
  const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Dump d(dump ? "lm_head_" + name : std::string(), "lm_head");
  if (bf16) d.bf16("W", Wb, {V, C}); else d.f32("W", Wf, {V, C});
  d.f32("h", h, {N, C}); d.f32("dlogp", dlogp, {N}); d.i32("targets", targets, {N}); d.f32("inv_temp", inv_temp, {N});
  d.i32("mask_idx", mask_idx, {N});
  d.tensor("masks", "u32", masks, {2, (long)words});
  d.f32("cpu.logp", logp, {N}); d.f32("cpu.lse", lse, {N}); d.f32("cpu.entropy", ent, {N}); d.f32("cpu.dh", dh, {N, C});
  if (g_cpu_only) return d.finish("");
  Dev<uint16_t> gWb(bf16 ? Wb : vector<uint16_t>());
  Dev<float> gWf(bf16 ? vector<float>() : Wf);
  const WeightRef gW = bf16 ? WeightRef(gWb.p, WDtype::BF16) : WeightRef(gWf.p);
  Dev<float> gh(h), gdl(dlogp), git(inv_temp), glogp(N), glse(N), gent(N), gg((size_t)N * C), gdh((size_t)N * C);
  Dev<int32_t> gt(targets), gmi(mask_idx);
  Dev<uint32_t> gm(masks);
  auto fwd = [&] {
    cuda::lm_head_forward(glogp.p, glse.p, gent.p, gg.p, gh.p, gW, gt.p, N, C, V, nullptr, chunk, git.p, gmi.p, gm.p);
  };
  fwd();
  cuda::lm_head_backward(gdh.p, gdl.p, gg.p, gW, gt.p, N, C, git.p);
  Report rep{"cuda.op.lm_head." + name, tol};
  rep.add("logp", logp, glogp.get());
  rep.add("lse", lse, glse.get());
  rep.add("entropy", ent, gent.get());
  rep.add("g", g, gg.get());
  rep.add("dh", dh, gdh.get());
  const double ms = time_ms(fwd, 3);
  rep.extra = ",\"N\":" + std::to_string(N) + ",\"C\":" + std::to_string(C) + ",\"V\":" + std::to_string(V) +
              ",\"fwd_ms\":" + fmt("%.3f", ms) + ",\"fwd_tflops\":" + fmt("%.2f", 4.0 * N * C * (double)V / ms * 1e-9) +
              ",\"cpu_s\":" + fmt("%.2f", cpu_s);
  rep.print();
  d.f32("cuda.logp", glogp.get(), {N}); d.f32("cuda.lse", glse.get(), {N}); d.f32("cuda.entropy", gent.get(), {N});
  d.f32("cuda.dh", gdh.get(), {N, C});
  d.finish("");
}

void check_adamw() {
  Rng r(9);
  const size_t n = g_quick ? 10000 : 3000000;
  auto p = r.uniform(n, -1, 1), m = r.uniform(n, -0.01f, 0.01f), v = r.uniform(n, 0, 1e-4f);
  const AdamWConfig c{0.9f, 0.999f, 1e-8f, 0.01f};
  Dev<float> gp(p), gm(m), gv(v);
  for (long step = 1; step <= 3; ++step) {
    auto g = r.uniform(n, -1, 1);
    adamw_step(p.data(), g.data(), m.data(), v.data(), n, step, 1e-3f, c);
    Dev<float> gg(g);
    cuda::adamw_step(gp.p, gg.p, gm.p, gv.p, n, step, 1e-3f, c);
  }
  Report rep{"cuda.op.adamw.3steps", 1e-4};
  rep.add("param", p, gp.get());
  rep.add("m", m, gm.get());
  rep.add("v", v, gv.get());
  rep.print();
}

// Products against the CPU gemm on bf16-representable inputs (so both sides multiply the same numbers and the
// only difference is the order of f32 additions): every transpose combination, cuBLAS and the fallback.
void check_gemm_paths() {
  Rng r(10);
  const int M = 333, N = 517, K = 300;
  for (int fb = 0; fb < 2; ++fb) {
    if (fb == 0 && !cuda::gemm_have_cublas()) continue;
    cuda::gemm_force_fallback(fb == 1);
    const char* path = fb ? "fallback" : "cublas";
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int lda = ta ? M : K, ldb = tb ? K : N;
        auto A = r.uniform((size_t)M * K, -1, 1), B = r.uniform((size_t)K * N, -1, 1), C0 = r.uniform((size_t)M * N, -1, 1);
        auto Ab = to_bf16(A), Bb = to_bf16(B);
        vector<float> Aw(A.size()), Bw(B.size());
        widen(Aw.data(), WeightRef(Ab.data(), WDtype::BF16), 0, Aw.size());
        widen(Bw.data(), WeightRef(Bb.data(), WDtype::BF16), 0, Bw.size());
        vector<float> ref = C0, ref32 = C0;
        gemm(ta, tb, M, N, K, 0.5f, Aw.data(), lda, Bw.data(), ldb, 0.25f, ref.data(), N);
        gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, ref32.data(), N);
        Dev<uint16_t> gA(Ab), gB(Bb);
        Dev<float> gA32(A), gB32(B), gC(C0), gC32(C0);
        cuda::gemm_half(WDtype::BF16, ta, tb, M, N, K, 0.5f, gA.p, lda, gB.p, ldb, 0.25f, gC.p, N);
        cuda::gemm(ta, tb, M, N, K, 0.5f, gA32.p, lda, gB32.p, ldb, 0.25f, gC32.p, N);
        Report rep{std::string("cuda.gemm.") + path + ".t" + std::to_string(ta) + std::to_string(tb), 1e-4};
        rep.add("bf16", ref, gC.get());
        rep.add("f32", ref32, gC32.get());
        rep.print();
      }
  }
  cuda::gemm_force_fallback(false);
}

// bf16 x bf16 -> f32 at n^3: TFLOP/s through each path (median of 5 after a warm-up), random data.
void bench_gemm(int n) {
  Rng r(11);
  Dev<float> a32(r.uniform((size_t)n * n, -1, 1)), b32(r.uniform((size_t)n * n, -1, 1));
  Dev<uint16_t> a((size_t)n * n), b((size_t)n * n);
  cuda::to_half(a.p, a32.p, a.n, WDtype::BF16);
  cuda::to_half(b.p, b32.p, b.n, WDtype::BF16);
  Dev<float> c((size_t)n * n);
  const double flop = 2.0 * n * (double)n * n;
  for (int fb = 0; fb < 2; ++fb) {
    if (fb == 0 && !cuda::gemm_have_cublas()) continue;
    cuda::gemm_force_fallback(fb == 1);
    const double ms = time_ms([&] { cuda::gemm_half(WDtype::BF16, false, true, n, n, n, 1.0f, a.p, n, b.p, n, 0.0f, c.p, n); });
    std::printf("{\"figure\":\"cuda.gemm.bf16.%d.%s.tflops\",\"value\":%.1f,\"unit\":\"TFLOP/s\",\"ms\":%.3f}\n", n,
                fb ? "fallback" : "cublas", flop / ms * 1e-9, ms);
    std::fflush(stdout);
  }
  cuda::gemm_force_fallback(false);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") g_quick = true;
    else if (a == "--dump" && i + 1 < argc) g_dump = argv[++i];
    else if (a == "--cpu-dump" && i + 1 < argc) { g_dump = argv[++i]; g_cpu_only = g_quick = true; }
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--dump DIR] | --cpu-dump DIR\n", argv[0]);
      return 64;
    }
  }
  if (g_cpu_only) {
    try {
      check_rmsnorm("hidden", 513, 1024);
      check_rmsnorm("per_head", 256, 128);
      check_rope();
      check_linear_lora();
      check_attention("quick_d40_gqa2", {77, 1, 50}, 4, 2, 40, true);
      check_attention("quick_d128_gqa4", {40, 97}, 8, 2, 128, true);
      check_lm_head("bf16_V5000", 40, 256, 5000, 16, true, 1e-2, true);
    } catch (const std::exception& ex) {
      std::printf("{\"figure\":\"cuda.check.error\",\"ok\":false,\"error\":\"%s\"}\n", json_escape(ex.what()).c_str());
      return 1;
    }
    std::printf("{\"figure\":\"cuda.check.cpu_dump\",\"ok\":true,\"dir\":\"%s\"}\n", g_dump.c_str());
    return 0;
  }
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    std::printf("{\"figure\":\"cuda.check\",\"ok\":false,\"skipped\":\"no CUDA device (%s)\"}\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Each case runs on its own: an exception (a failed CHECK, a launch error) fails that case with one line and
  // the next case runs, so one device run reports on every op. Only an error that sticks to the CUDA context
  // (an illegal address inside a kernel) ends the run, since no later result could be trusted.
  bool context_lost = false;
  auto run = [&](const char* name, const std::function<void()>& fn) {
    if (context_lost) return;
    try {
      fn();
      CUDA_CHECK(cudaDeviceSynchronize());
    } catch (const std::exception& ex) {
      ++g_failed;
      std::printf("{\"figure\":\"cuda.case.%s\",\"ok\":false,\"error\":\"%s\"}\n", name, json_escape(ex.what()).c_str());
      std::fflush(stdout);
      cudaGetLastError();  // clears a non-sticky error; a sticky one is returned again below
      if (cudaDeviceSynchronize() != cudaSuccess) {
        context_lost = true;
        std::printf("{\"figure\":\"cuda.check.aborted\",\"ok\":false,\"after\":\"%s\"}\n", name);
      }
    }
  };
  run("device", [] {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("{\"figure\":\"cuda.device\",\"name\":\"%s\",\"sm\":\"%d.%d\",\"multiprocessors\":%d,\"cublas\":%s,"
                "\"cublas_path\":\"%s\",\"cpu_threads\":%d}\n",
                json_escape(prop.name).c_str(), prop.major, prop.minor, prop.multiProcessorCount,
                cuda::gemm_have_cublas() ? "true" : "false", json_escape(cuda::gemm_cublas_path()).c_str(), cpu_threads());
    std::fflush(stdout);
  });
  run("gemm_paths", check_gemm_paths);
  run("embedding", check_embedding);
  run("rmsnorm_hidden", [] { check_rmsnorm("hidden", 513, 1024); });
  run("rmsnorm_per_head", [] { check_rmsnorm("per_head", g_quick ? 256 : 2048 * 8, 128); });
  run("rope", check_rope);
  run("swiglu", check_swiglu);
  run("linear_lora", check_linear_lora);
  if (g_quick) {
    run("attention_quick", [] { check_attention("quick_d40_gqa2", {77, 1, 50}, 4, 2, 40, true); });
  } else {
    run("attention_gqa1", [] { check_attention("T2048_gqa1_d128_packed4", {700, 1, 333, 1014}, 16, 16, 128, true); });
    run("attention_gqa2", [] { check_attention("T2048_gqa2_d64_single", {2048}, 16, 8, 64, false); });
    run("attention_gqa4", [] { check_attention("T2048_gqa4_d128_packed2", {1000, 1048}, 16, 4, 128, false); });
    run("attention_odd", [] { check_attention("d40_gqa2_odd", {77, 1, 50, 129}, 4, 2, 40, false); });
  }
  run("attention_generation", check_attention_generation);
  run("lm_head_f32", [] { check_lm_head("f32_V40000", 70, 128, 40000, 32, false, 1e-4, false); });
  if (g_quick) run("lm_head_bf16", [] { check_lm_head("bf16_V5000", 40, 256, 5000, 16, true, 1e-2, true); });
  else run("lm_head_bf16", [] { check_lm_head("bf16_qwen3_V151936", 200, 1024, 151936, 64, true, 1e-2, true); });
  run("adamw", check_adamw);
  if (!g_quick) run("bench_gemm", [] { bench_gemm(4096); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"figure\":\"cuda.check.summary\",\"ok\":%s,\"failed\":%d,\"seconds\":%.1f}\n", g_failed ? "false" : "true",
              g_failed, s);
  return g_failed ? 1 : 0;
}
