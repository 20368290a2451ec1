#pragma once
#include <cstdint>
namespace mcprl {
// From the model's config.json, read in TypeScript (no defaults here).
struct RopeScaling {
  // type 0 = none, 1 = linear (positions / factor), 2 = llama3 (frequency-dependent, as in HF).
  int type;
  float factor, low_freq_factor, high_freq_factor;  // factor: linear and llama3; the others llama3 only
  int original_max_position;                         // llama3 only
};
// inv_freq (D/2) = theta^(-2i/D), adjusted by the scaling rule; computed as HF does in f32.
void rope_inv_freq(float* inv_freq, int D, float theta, const RopeScaling& s);
// x (T, H, D) rotated in place by angle pos[t] * inv_freq[i] on the pairs (i, i + D/2): HF's
// rotate_half convention, not interleaved pairs.
void rope_forward(float* x, const int32_t* pos, const float* inv_freq, int T, int H, int D);
// The rotation is orthogonal, so backward rotates dout by the opposite angle (in place: dout -> dx).
void rope_backward(float* dx, const int32_t* pos, const float* inv_freq, int T, int H, int D);
}  // namespace mcprl
