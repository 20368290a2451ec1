// The op check's GEMM cases (harness.cuh): every transpose combination through cuBLAS and the fallback kernel
// against the CPU gemm, and their rates.
#include "harness.cuh"

namespace cuda_check {

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

}  // namespace cuda_check
