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
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "harness.cuh"

namespace mcprl {
// weight.cc widens f16 through safetensors.cc's f16_to_f32; the check does not link the safetensors reader
// (it needs nlohmann-json, absent on the GPU machine), so the conversion comes from CUDA's own header here.
float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
}  // namespace mcprl

using namespace cuda_check;

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
