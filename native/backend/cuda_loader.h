// The CUDA library (build/cuda/libmcprl_cuda.so, native/cuda/entry.h), loaded lazily: only when a CUDA device is
// asked for (src/engine/device.ts), never when the addon loads, so a CPU install never needs it.
#pragma once
#include <string>

#include "backend.h"
#include "../cuda/entry.h"

namespace mcprl {

struct CudaLibrary {
  bool loaded = false;
  std::string error;             // why it did not load (dlopen's message, a missing symbol, another ABI)
  std::string archs;             // the compute capabilities it was built for, "80,90"
  McprlCudaProbe probe{};        // what it found: driver, device, memory (when loaded)
};

// Loads the library at `path` (once per process: once one has loaded, a call with another path says so; one that
// failed to load is forgotten) and probes the machine again.
CudaLibrary cuda_library(const std::string& path);

// The CUDA Backend table of the loaded library (null when none loaded). Taking it ends the probes' habit of giving
// the device's context back (entry.cu), so only the code that moves a model there calls it.
const Backend* cuda_backend_table();

}  // namespace mcprl
