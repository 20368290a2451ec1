// Rotary position embedding on the device (ops/rope.h): HF's rotate_half pairs (i, i + D/2), in place.
// Backward rotates by the opposite angle (the rotation is orthogonal). No parameters.
#include <algorithm>

#include "cuda_common.cuh"
#include "ops.h"

namespace mcprl {
namespace cuda {

// One thread per (row t, head h, pair i). The angle is the f32 product pos * inv_freq as torch computes it;
// sincosf (not the fast __sinf) does the full range reduction, so angles of thousands of radians stay accurate.
__global__ void rope_kernel(float* __restrict__ x, const int32_t* __restrict__ pos, const float* __restrict__ inv_freq,
                            int T, int H, int D, float sign) {
  const int half = D / 2;
  const long total = (long)T * H * half;
  for (long idx = blockIdx.x * (long)blockDim.x + threadIdx.x; idx < total; idx += (long)gridDim.x * blockDim.x) {
    const int i = (int)(idx % half);
    const long th = idx / half;  // t * H + h
    const int t = (int)(th / H);
    const float ang = (float)pos[t] * inv_freq[i];
    float sn, cs;
    sincosf(ang, &sn, &cs);
    sn *= sign;
    float* v = x + th * D;
    const float a = v[i], b = v[i + half];
    v[i] = a * cs - b * sn;
    v[i + half] = b * cs + a * sn;
  }
}

static void rotate(float* x, const int32_t* pos, const float* inv_freq, int T, int H, int D, float sign) {
  const long total = (long)T * H * (D / 2);
  if (total == 0) return;
  const unsigned blocks = (unsigned)std::min<long>(cdiv(total, 256), 65535L * 16);
  rope_kernel<<<blocks, 256, 0, stream()>>>(x, pos, inv_freq, T, H, D, sign);
  CUDA_LAUNCHED("rope");
}

void rope_forward(float* x, const int32_t* pos, const float* inv_freq, int T, int H, int D) {
  rotate(x, pos, inv_freq, T, H, D, 1.0f);
}

void rope_backward(float* dx, const int32_t* pos, const float* inv_freq, int T, int H, int D) {
  rotate(dx, pos, inv_freq, T, H, D, -1.0f);
}

}  // namespace cuda
}  // namespace mcprl
