// The test addon's entry point and its op bindings: gradcheck, the GEMM kernels, attention, SwiGLU and RMSNorm
// alone (tests), with the bench bindings of bench.cc. See bindings.h for why this is an addon of its own.
#include <napi.h>

#include <string>
#include <vector>

#include "../addon/napi_util.h"
#include "../backend/backend.h"
#include "../core/common.h"
#include "../kernels/gemm.h"
#include "../ops/attention.h"
#include "bindings.h"
#include "gradcheck.h"

namespace mcprl {

// The attention op alone (tests and bench). Shapes as native/ops/attention.h; `kernel` 'tiles' (the engine's)
// or 'reference' (the double-precision oracle).
AttnShape attn_shape(const Napi::CallbackInfo& info, int at) {
  AttnShape s{(int)int_arg(info[at], "H", 1, 4096), (int)int_arg(info[at + 1], "Hkv", 1, 4096),
              (int)int_arg(info[at + 2], "D", 1, 4096)};
  CHECK(s.H % s.Hkv == 0, "attention: H must be a multiple of Hkv");
  return s;
}
static bool attn_reference(const Napi::Value& v) {
  std::string kernel = str_arg(v, "kernel");
  CHECK(kernel == "tiles" || kernel == "reference", "attention: kernel must be 'tiles' or 'reference', got '" + kernel + "'");
  return kernel == "reference";
}

namespace {

// gradcheck(op, seed, eps, samples): [{ input, maxAbsErr, maxAbsGrad, checked }]
Napi::Value Gradcheck(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    set_threads(1);
    auto res = gradcheck_op(str_arg(info[0], "op"), (unsigned)int_arg(info[1], "seed", 0, 4294967295LL),
                            num_arg(info[2], "eps"), (int)int_arg(info[3], "samples", 1, kMaxInt));
    auto arr = Napi::Array::New(info.Env(), res.size());
    for (size_t i = 0; i < res.size(); ++i) {
      auto o = Napi::Object::New(info.Env());
      o.Set("input", res[i].input);
      o.Set("maxAbsErr", res[i].max_abs_err);
      o.Set("maxAbsGrad", res[i].max_abs_grad);
      o.Set("checked", res[i].checked);
      arr.Set((uint32_t)i, o);
    }
    return arr;
  });
}

// gemm(transA, transB, M, N, K, A, B, kernel: 'portable'|'portable-avx2'|'blas'|'auto', threads): Float32Array
// C = op(A) op(B). 'portable-avx2' is the portable kernel with its AVX2 tiles even where the CPU has AVX-512.
Napi::Value Gemm(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    bool ta = bool_arg(info[0], "transA"), tb = bool_arg(info[1], "transB");
    int M = (int)int_arg(info[2], "M", 1, kMaxInt), N = (int)int_arg(info[3], "N", 1, kMaxInt),
        K = (int)int_arg(info[4], "K", 1, kMaxInt);
    auto A = to_f32(info[5], "A");
    auto B = to_f32(info[6], "B");
    std::string kernel = str_arg(info[7], "kernel");
    set_threads(info[8].IsUndefined() ? 0 : (int)int_arg(info[8], "threads", 0, kMaxThreads));  // test helper: all cores when left out
    CHECK(M > 0 && N > 0 && K > 0 && A.size() == (size_t)M * K && B.size() == (size_t)K * N, "gemm: bad sizes");
    std::vector<float> C((size_t)M * N, 0.0f);
    int lda = ta ? M : K, ldb = tb ? K : N;
    if (kernel == "portable-avx2") {
      const bool prev = gemm_avx512();
      gemm_set_avx512(false);
      gemm_portable(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
      gemm_set_avx512(prev);
    } else if (kernel == "portable") gemm_portable(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
    else if (kernel == "blas") gemm_blas(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
    else gemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
    return f32_array(info.Env(), C);
  });
}

// attention(q, k, v, H, Hkv, D, segments: Int32Array of (q0, nq, npast, kRow0) per segment, kernel, threads?):
// { out, lse }. Segment s reads key/value rows kRow0 .. kRow0 + npast + nq of k/v.
Napi::Value Attention(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    auto q = to_f32(info[0], "q"), k = to_f32(info[1], "k"), v = to_f32(info[2], "v");
    AttnShape sh = attn_shape(info, 3);
    auto sg = to_i32(info[6], "segments");
    bool ref = attn_reference(info[7]);
    set_threads(info[8].IsUndefined() ? 0 : (int)int_arg(info[8], "threads", 0, kMaxThreads));
    const size_t qrow = (size_t)sh.H * sh.D, krow = (size_t)sh.Hkv * sh.D;
    CHECK(q.size() % qrow == 0 && k.size() % krow == 0 && v.size() == k.size() && sg.size() % 4 == 0,
          "attention: q, k, v or segments have the wrong length");
    const int64_t T = (int64_t)(q.size() / qrow), keys = (int64_t)(k.size() / krow);
    std::vector<AttnSegment> segs(sg.size() / 4);
    for (size_t s = 0; s < segs.size(); ++s) {
      const int64_t q0 = sg[4 * s], nq = sg[4 * s + 1], npast = sg[4 * s + 2], k0 = sg[4 * s + 3];
      CHECK(q0 >= 0 && nq >= 1 && q0 + nq <= T && npast >= 0 && k0 >= 0 && k0 + npast + nq <= keys,
            "attention: segment " + std::to_string(s) + " is out of range of q or k");
      segs[s] = AttnSegment{(int)q0, (int)nq, (int)npast, k.data() + k0 * krow, v.data() + k0 * krow};
    }
    std::vector<float> out(q.size(), 0.0f), lse((size_t)T * sh.H, 0.0f);
    if (ref) attention_forward_reference(out.data(), lse.data(), q.data(), segs.data(), (int)segs.size(), sh.H, sh.Hkv, sh.D);
    else cpu_backend().attention_forward(out.data(), lse.data(), q.data(), segs.data(), (int)segs.size(), sh.H, sh.Hkv, sh.D);
    auto o = Napi::Object::New(info.Env());
    o.Set("out", f32_array(info.Env(), out));
    o.Set("lse", f32_array(info.Env(), lse));
    return o;
  });
}

// attentionBackward(dout, q, k, v, out, lse, cuSeqlens, H, Hkv, D, kernel, threads?): { dq, dk, dv } of packed
// sequences (npast = 0; k/v rows packed like q's).
Napi::Value AttentionBackward(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    auto dout = to_f32(info[0], "dout"), q = to_f32(info[1], "q"), k = to_f32(info[2], "k"), v = to_f32(info[3], "v");
    auto out = to_f32(info[4], "out"), lse = to_f32(info[5], "lse");
    auto cu = to_i32(info[6], "cuSeqlens");
    AttnShape sh = attn_shape(info, 7);
    bool ref = attn_reference(info[10]);
    set_threads(info[11].IsUndefined() ? 0 : (int)int_arg(info[11], "threads", 0, kMaxThreads));
    const size_t qrow = (size_t)sh.H * sh.D, krow = (size_t)sh.Hkv * sh.D;
    CHECK(q.size() % qrow == 0 && cu.size() >= 2 && cu.front() == 0, "attention: bad q or cuSeqlens");
    const size_t T = q.size() / qrow;
    for (size_t s = 1; s < cu.size(); ++s) CHECK(cu[s] > cu[s - 1], "attention: cuSeqlens must increase");
    CHECK((size_t)cu.back() == T && dout.size() == q.size() && out.size() == q.size() && k.size() == T * krow &&
              v.size() == k.size() && lse.size() == T * sh.H,
          "attention: dout, k, v, out, lse or cuSeqlens disagree with q's T");
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    const int nseq = (int)cu.size() - 1;
    if (ref)
      attention_backward_reference(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                                   lse.data(), cu.data(), nseq, sh.H, sh.Hkv, sh.D);
    else
      cpu_backend().attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                       out.data(), lse.data(), cu.data(), nseq, sh.H, sh.Hkv, sh.D);
    auto o = Napi::Object::New(info.Env());
    o.Set("dq", f32_array(info.Env(), dq));
    o.Set("dk", f32_array(info.Env(), dk));
    o.Set("dv", f32_array(info.Env(), dv));
    return o;
  });
}

// swiglu(gate, up, dout, threads?): { out, dgate, dup }, the engine's SwiGLU forward and backward on N elements (tests).
Napi::Value Swiglu(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    auto gate = to_f32(info[0], "gate"), up = to_f32(info[1], "up"), dout = to_f32(info[2], "dout");
    set_threads(info[3].IsUndefined() ? 0 : (int)int_arg(info[3], "threads", 0, kMaxThreads));
    CHECK(up.size() == gate.size() && dout.size() == gate.size(), "swiglu: gate, up and dout differ in length");
    const long N = (long)gate.size();
    std::vector<float> out(N), dgate(N), dup(N);
    const Backend& be = cpu_backend();
    be.swiglu_forward(out.data(), gate.data(), up.data(), N);
    be.swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), N);
    auto o = Napi::Object::New(info.Env());
    o.Set("out", f32_array(info.Env(), out));
    o.Set("dgate", f32_array(info.Env(), dgate));
    o.Set("dup", f32_array(info.Env(), dup));
    return o;
  });
}

// rmsnorm(x, w, dout, C, eps, threads?): { out, rstd, dx, dw }, the engine's RMSNorm forward and backward on the
// N = x.length / C rows of x (tests; dw starts at 0).
Napi::Value Rmsnorm(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    auto x = to_f32(info[0], "x"), w = to_f32(info[1], "w"), dout = to_f32(info[2], "dout");
    const int C = (int)int_arg(info[3], "C", 1, kMaxInt);
    const float eps = (float)num_arg(info[4], "eps");
    set_threads(info[5].IsUndefined() ? 0 : (int)int_arg(info[5], "threads", 0, kMaxThreads));
    CHECK(w.size() == (size_t)C && x.size() % C == 0 && dout.size() == x.size(),
          "rmsnorm: w must hold C entries, x and dout whole rows of C");
    const int N = (int)(x.size() / C);
    std::vector<float> out(x.size()), rstd(N), dx(x.size()), dw(C, 0.0f);
    const Backend& be = cpu_backend();
    be.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    be.rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    auto o = Napi::Object::New(info.Env());
    o.Set("out", f32_array(info.Env(), out));
    o.Set("rstd", f32_array(info.Env(), rstd));
    o.Set("dx", f32_array(info.Env(), dx));
    o.Set("dw", f32_array(info.Env(), dw));
    return o;
  });
}

// info(): what this addon's copy of the GEMM reports: the kernels it has and its fork guard's counters.
Napi::Value Info(const Napi::CallbackInfo& info) {
  auto o = Napi::Object::New(info.Env());
  set_gemm_info(o);
  return o;
}

Napi::Object InitAll(Napi::Env env, Napi::Object exports) {
  exports.Set("gradcheck", Napi::Function::New(env, Gradcheck));
  exports.Set("gemm", Napi::Function::New(env, Gemm));
  exports.Set("attention", Napi::Function::New(env, Attention));
  exports.Set("attentionBackward", Napi::Function::New(env, AttentionBackward));
  exports.Set("swiglu", Napi::Function::New(env, Swiglu));
  exports.Set("rmsnorm", Napi::Function::New(env, Rmsnorm));
  exports.Set("setPortableGemm", Napi::Function::New(env, set_portable_gemm));
  exports.Set("info", Napi::Function::New(env, Info));
  exports.Set("gemmBench", Napi::Function::New(env, GemmBench));
  exports.Set("attentionBench", Napi::Function::New(env, AttentionBench));
  exports.Set("lmHeadBench", Napi::Function::New(env, LmHeadBench));
  return exports;
}

}  // namespace

}  // namespace mcprl

static Napi::Object Init(Napi::Env env, Napi::Object exports) { return mcprl::InitAll(env, exports); }

NODE_API_MODULE(mcprl_native_test, Init)
