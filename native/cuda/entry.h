// The CUDA library's C face (build/cuda/libmcprl_cuda.so, built from native/cuda/*.cu by native/cuda/build-lib.cjs
// when nvcc is found): what the addon (native/backend/cuda_loader.cc) finds with dlsym after it loads the library lazily,
// only when a CUDA device is asked for. Plain C types only: the addon is compiled without the CUDA headers.
#pragma once
#include <stddef.h>

// Bumped whenever this struct or native/backend/backend.h's Backend table changes, so an addon never takes a table
// from a library built from other sources (the addon compares it with its own).
#define MCPRL_CUDA_ABI 2

extern "C" {

// What the library finds on this machine (mcprl_cuda_probe). `status` names the first missing piece.
enum McprlCudaStatus {
  MCPRL_CUDA_OK = 0,
  MCPRL_CUDA_NO_DRIVER = 1,  // libcuda.so.1 absent or too old for the runtime linked in
  MCPRL_CUDA_NO_DEVICE = 2,  // a driver but no device (or none visible: CUDA_VISIBLE_DEVICES)
  MCPRL_CUDA_ERROR = 3,      // any other CUDA error (in `error`)
};

struct McprlCudaProbe {
  int status;            // McprlCudaStatus
  int driver_version;    // cudaDriverGetVersion (e.g. 13000), 0 when no driver
  int runtime_version;   // the runtime linked into the library
  int device_count;
  int cc_major, cc_minor;  // device 0's compute capability
  size_t free_bytes, total_bytes;  // device 0's memory (cudaMemGetInfo)
  char name[128];        // device 0's name
  char error[256];       // the CUDA error's text when status != OK
};

int mcprl_cuda_abi(void);
// The compute capabilities the library holds machine code for, as "80,90" (the build's -gencode list).
const char* mcprl_cuda_archs(void);
// Fills `out` (never throws). Returns out->status.
int mcprl_cuda_probe(struct McprlCudaProbe* out);  // leaves no CUDA context behind (cudaDeviceReset)
// The CUDA Backend table (a `const mcprl::Backend*`, native/backend/backend.h); only after a probe said OK.
const void* mcprl_cuda_backend(void);

}
