// The library's C entry points (entry.h): the probe of driver, device and memory, and the Backend table.
#include <atomic>
#include <cstdio>
#include <cstring>

#include "entry.h"
#include "ops.h"

#ifndef MCPRL_CUDA_ARCHS
#define MCPRL_CUDA_ARCHS "unknown"
#endif

// Set once the addon has taken the Backend table (the engine may then hold device memory).
static std::atomic<bool> g_backend_taken{false};

extern "C" {

int mcprl_cuda_abi(void) { return MCPRL_CUDA_ABI; }

const char* mcprl_cuda_archs(void) { return MCPRL_CUDA_ARCHS; }

int mcprl_cuda_probe(McprlCudaProbe* out) {
  std::memset(out, 0, sizeof *out);
  cudaRuntimeGetVersion(&out->runtime_version);
  auto failed = [&](int status, cudaError_t e) {
    out->status = status;
    std::snprintf(out->error, sizeof out->error, "%s", cudaGetErrorString(e));
    return status;
  };
  cudaError_t e = cudaDriverGetVersion(&out->driver_version);
  if (e != cudaSuccess || out->driver_version == 0)
    return failed(MCPRL_CUDA_NO_DRIVER, e == cudaSuccess ? cudaErrorInsufficientDriver : e);
  e = cudaGetDeviceCount(&out->device_count);
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaErrorInvalidDevice ||
      (e == cudaSuccess && out->device_count == 0)) {
    out->device_count = 0;
    return failed(e == cudaErrorInsufficientDriver ? MCPRL_CUDA_NO_DRIVER : MCPRL_CUDA_NO_DEVICE,
                  e == cudaSuccess ? cudaErrorNoDevice : e);
  }
  if (e != cudaSuccess) return failed(MCPRL_CUDA_ERROR, e);
  cudaDeviceProp p;
  if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) return failed(MCPRL_CUDA_ERROR, e);
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  std::snprintf(out->name, sizeof out->name, "%s", p.name);
  if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaMemGetInfo(&out->free_bytes, &out->total_bytes)) != cudaSuccess)
    return failed(MCPRL_CUDA_ERROR, e);
  // cudaMemGetInfo made the device's primary context (hundreds of MiB of device memory, for the process's life): a
  // probe gives it back, so that a process that ends up on the CPU (auto) holds nothing on a GPU others may share.
  // Only until the backend's table has been taken: after that the context holds the engine's tensors.
  if (!g_backend_taken.load()) cudaDeviceReset();
  return out->status = MCPRL_CUDA_OK;
}

const void* mcprl_cuda_backend(void) {
  g_backend_taken = true;
  return &mcprl::cuda_backend();
}

}
