// Rotary position embedding. Backward rule: parameter grads +=, activation grads = (RoPE has no params).
#include "rope.h"

#include <cmath>

namespace mcprl {

void rope_inv_freq(float* inv_freq, int D, float theta, const RopeScaling& s) {
  const int half = D / 2;
  for (int i = 0; i < half; ++i) {
    // torch: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), f32 throughout.
    float expo = (float)(2 * i) / (float)D;
    float f = 1.0f / std::pow(theta, expo);
    if (s.type == 1) {
      f = f / s.factor;
    } else if (s.type == 2) {
      const float pi = 3.14159265358979323846f;
      float low_wavelen = (float)s.original_max_position / s.low_freq_factor;
      float high_wavelen = (float)s.original_max_position / s.high_freq_factor;
      float wavelen = 2.0f * pi / f;
      float g = wavelen > low_wavelen ? f / s.factor : f;
      float smooth = ((float)s.original_max_position / wavelen - s.low_freq_factor) /
                     (s.high_freq_factor - s.low_freq_factor);
      float smoothed = (1.0f - smooth) * g / s.factor + smooth * g;
      bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : g;
    }
    inv_freq[i] = f;
  }
}

static void rotate(float* x, const int32_t* pos, const float* inv_freq, int T, int H, int D, float sign) {
  const int half = D / 2;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float cs[512], sn[512];  // head_dim <= 1024 (checked at model load)
    for (int i = 0; i < half; ++i) {
      float ang = (float)pos[t] * inv_freq[i];  // f32 product, as torch computes freqs
      cs[i] = (float)std::cos((double)ang);
      sn[i] = sign * (float)std::sin((double)ang);
    }
    for (int h = 0; h < H; ++h) {
      float* v = x + ((size_t)t * H + h) * D;
      for (int i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

void rope_forward(float* x, const int32_t* pos, const float* inv_freq, int T, int H, int D) {
  rotate(x, pos, inv_freq, T, H, D, 1.0f);
}

void rope_backward(float* dx, const int32_t* pos, const float* inv_freq, int T, int H, int D) {
  rotate(dx, pos, inv_freq, T, H, D, -1.0f);
}

}  // namespace mcprl
