// dlopen of the CUDA library (cuda_loader.h). The library links the CUDA runtime statically and opens the
// driver (libcuda.so.1) itself, so loading it succeeds on a machine without a driver: the probe then says so.
#include "cuda_loader.h"

#include <dlfcn.h>

#include <mutex>

namespace mcprl {

namespace {

struct Loaded {
  std::string path;
  void* handle = nullptr;
  std::string error;
  int (*abi)() = nullptr;
  const char* (*archs)() = nullptr;
  int (*probe)(McprlCudaProbe*) = nullptr;
  const void* (*backend)() = nullptr;
};

std::mutex g_mu;
Loaded* g_lib = nullptr;  // kept for the process: the library is never unloaded

template <typename F>
bool sym(Loaded& l, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(l.handle, name));
  if (!f) l.error = std::string("symbol ") + name + " missing";
  return f != nullptr;
}

}  // namespace

CudaLibrary cuda_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mu);
  CudaLibrary r;
  // A library that failed to load is forgotten, so that another path may be tried (a loaded one stays).
  if (g_lib && !g_lib->handle && g_lib->path != path) {
    delete g_lib;
    g_lib = nullptr;
  }
  if (!g_lib) {
    g_lib = new Loaded;
    g_lib->path = path;
    g_lib->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!g_lib->handle) {
      const char* e = dlerror();
      g_lib->error = e ? e : "dlopen failed";
    } else if (sym(*g_lib, g_lib->abi, "mcprl_cuda_abi") && sym(*g_lib, g_lib->archs, "mcprl_cuda_archs") &&
               sym(*g_lib, g_lib->probe, "mcprl_cuda_probe") && sym(*g_lib, g_lib->backend, "mcprl_cuda_backend")) {
      if (g_lib->abi() != MCPRL_CUDA_ABI)
        g_lib->error = "built from other sources (ABI " + std::to_string(g_lib->abi()) + ", the addon's " +
                       std::to_string(MCPRL_CUDA_ABI) + "): rebuild with `node native/cuda/build-lib.cjs`";
    }
  }
  if (g_lib->path != path) {
    r.error = "another CUDA library is loaded in this process already: " + g_lib->path;
    return r;
  }
  if (!g_lib->error.empty()) {
    r.error = g_lib->error;
    return r;
  }
  r.loaded = true;
  r.archs = g_lib->archs();
  g_lib->probe(&r.probe);
  // The table is taken only by the code that runs the engine on it (issue 44 point 3): taking it here would keep
  // the probe's context alive in every process that only asked (auto).
  return r;
}

const Backend* cuda_backend_table() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_lib || !g_lib->handle || !g_lib->error.empty()) return nullptr;
  return static_cast<const Backend*>(g_lib->backend());
}

}  // namespace mcprl
