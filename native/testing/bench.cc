// The bench bindings of the test addon (bindings.h): GEMM GFLOP/s and the attention and LM head ops' CPU seconds,
// measured on this addon's compute thread (run_async), for bench/*.bench.ts.
#include <napi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../addon/napi_util.h"
#include "../backend/backend.h"
#include "../kernels/gemm.h"
#include "../ops/lm_head.h"
#include "bindings.h"

namespace mcprl {

// gemmBench(n, kernel, reps, threads): Promise<number> GFLOP/s of an n x n x n sgemm (best of reps).
Napi::Value GemmBench(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    int n = (int)int_arg(info[0], "n", 1, 1 << 16);
    std::string kernel = str_arg(info[1], "kernel");
    int reps = (int)int_arg(info[2], "reps", 1, kMaxInt);
    int threads = info[3].IsUndefined() ? 0 : (int)int_arg(info[3], "threads", 0, kMaxThreads);  // bench helper: all cores when left out
    if (kernel == "blas" && !gemm_have_blas()) throw Napi::Error::New(info.Env(), "this build has no OpenBLAS");
    auto result = std::make_shared<double>(0.0);
    return run_async(
        info.Env(),
        [n, kernel, reps, threads, result] {
          set_threads(threads);
          std::vector<float> A((size_t)n * n), B((size_t)n * n), C((size_t)n * n);
          std::mt19937 rng(1);
          std::uniform_real_distribution<float> d(-1, 1);
          for (auto& x : A) x = d(rng);
          for (auto& x : B) x = d(rng);
          double best = 1e30;
          for (int r = 0; r < reps; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            if (kernel == "portable") gemm_portable(false, true, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
            else gemm_blas(false, true, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            best = std::min(best, s);
          }
          *result = 2.0 * n * (double)n * n / best / 1e9;
        },
        [result](Napi::Env env) -> Napi::Value { return Napi::Number::New(env, *result); });
  });
}

// Seconds of CPU time of the calling thread: the single-threaded op benchmarks below measure this, not wall time,
// so a busy machine (other processes taking turns on the cores) changes the figures less.
static double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// attentionBench(T, H, Hkv, D, reps): Promise<{ forward, backward }>, CPU seconds (best of reps) of the op on one
// causal sequence of T random rows, single-threaded.
Napi::Value AttentionBench(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    int T = (int)int_arg(info[0], "T", 1, 1 << 20);
    AttnShape sh = attn_shape(info, 1);
    int reps = (int)int_arg(info[4], "reps", 1, kMaxInt);
    auto result = std::make_shared<std::array<double, 2>>();
    return run_async(
        info.Env(),
        [T, sh, reps, result] {
          set_threads(1);
          const size_t nq = (size_t)T * sh.H * sh.D, nk = (size_t)T * sh.Hkv * sh.D;
          std::vector<float> q(nq), k(nk), v(nk), g(nq), out(nq), lse((size_t)T * sh.H), dq(nq), dk(nk), dv(nk);
          std::mt19937 rng(1);
          std::normal_distribution<float> d;
          for (auto* x : {&q, &k, &v, &g})
            for (auto& e : *x) e = d(rng);
          AttnSegment seg{0, T, 0, k.data(), v.data()};
          int cu[2] = {0, T};
          const Backend& be = cpu_backend();
          (*result)[0] = (*result)[1] = 1e30;
          for (int r = 0; r < reps; ++r) {
            const double t0 = thread_cpu_seconds();
            be.attention_forward(out.data(), lse.data(), q.data(), &seg, 1, sh.H, sh.Hkv, sh.D);
            const double t1 = thread_cpu_seconds();
            be.attention_backward(dq.data(), dk.data(), dv.data(), g.data(), q.data(), k.data(), v.data(), out.data(),
                                  lse.data(), cu, 1, sh.H, sh.Hkv, sh.D);
            const double t2 = thread_cpu_seconds();
            (*result)[0] = std::min((*result)[0], t1 - t0);
            (*result)[1] = std::min((*result)[1], t2 - t1);
          }
        },
        [result](Napi::Env env) -> Napi::Value {
          auto o = Napi::Object::New(env);
          o.Set("forward", (*result)[0]);
          o.Set("backward", (*result)[1]);
          return o;
        });
  });
}

// lmHeadBench(N, C, V, reps): Promise<{ forward, backward, gemm }>, CPU seconds (best of reps, single-threaded): the LM head's
// forward (log-probabilities and the saved g, chunks and tiles of the training's size) and backward on N random rows
// against a random f32 (V, C) head, and the plain GEMMs of the same shapes (per chunk and vocabulary tile z = h Wᵀ,
// then g += P W),
// the rate the op is measured against.
Napi::Value LmHeadBench(const Napi::CallbackInfo& info) {
  return guard(info, [&]() -> Napi::Value {
    int N = (int)int_arg(info[0], "N", 1, 1 << 20), C = (int)int_arg(info[1], "C", 1, 1 << 16),
        V = (int)int_arg(info[2], "V", 1, 1 << 24);
    int reps = (int)int_arg(info[3], "reps", 1, kMaxInt);
    auto result = std::make_shared<std::array<double, 3>>();
    return run_async(
        info.Env(),
        [N, C, V, reps, result] {
          set_threads(1);
          const int chunk = lm_head_chunk_rows(V, N), cols = lm_head_tile_cols(V);  // as the trainer's and scoring's
          std::vector<float> h((size_t)N * C), W((size_t)V * C), g((size_t)N * C), dh((size_t)N * C);
          std::vector<float> logp(N), lse(N), dlogp(N, 1.0f), scratch(lm_head_scratch_floats(V, N));
          std::vector<int32_t> tg(N);
          std::mt19937 rng(1);
          std::normal_distribution<float> d;
          for (auto& x : h) x = d(rng);
          for (auto& x : W) x = 0.05f * d(rng);
          for (auto& t : tg) t = (int32_t)(rng() % (unsigned)V);
          const Backend& be = cpu_backend();
          auto secs = [](double t0) { return thread_cpu_seconds() - t0; };
          (*result)[0] = (*result)[1] = (*result)[2] = 1e30;
          for (int r = 0; r < reps; ++r) {
            double t0 = thread_cpu_seconds();
            be.lm_head_forward(logp.data(), lse.data(), nullptr, g.data(), h.data(), W.data(), tg.data(), N, C, V,
                               scratch.data(), chunk, nullptr, nullptr, nullptr);
            (*result)[0] = std::min((*result)[0], secs(t0));
            t0 = thread_cpu_seconds();
            be.lm_head_backward(dh.data(), dlogp.data(), g.data(), W.data(), tg.data(), N, C, nullptr);
            (*result)[1] = std::min((*result)[1], secs(t0));
            t0 = thread_cpu_seconds();
            for (int n0 = 0; n0 < N; n0 += chunk) {
              const int m = std::min(chunk, N - n0);
              for (int v0 = 0; v0 < V; v0 += cols) {
                const int vc = std::min(cols, V - v0);
                const float* Wt = W.data() + (size_t)v0 * C;
                gemm(false, true, m, vc, C, 1.0f, h.data() + (size_t)n0 * C, C, Wt, C, 0.0f, scratch.data(), vc);
                gemm(false, false, m, C, vc, 1.0f, scratch.data(), vc, Wt, C, v0 > 0 ? 1.0f : 0.0f,
                     g.data() + (size_t)n0 * C, C);
              }
            }
            (*result)[2] = std::min((*result)[2], secs(t0));
          }
        },
        [result](Napi::Env env) -> Napi::Value {
          auto o = Napi::Object::New(env);
          o.Set("forward", (*result)[0]);
          o.Set("backward", (*result)[1]);
          o.Set("gemm", (*result)[2]);
          return o;
        });
  });
}

}  // namespace mcprl
