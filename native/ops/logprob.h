#pragma once
#include <cstdint>
namespace mcprl {
// LM head + log-softmax, in chunks of `chunk` rows so (N, V) logits are never held whole:
// for each row n, z = h[n] W^T (V), logp[n] = z[target[n]] - logsumexp(z).
// h (N, C) final-normed hidden, W (V, C) lm head (the embedding when tied), targets (N) in [0, V).
// Outputs: logp (N); lse (N) saved for backward; entropy (N) = -sum p log p, optional (null to skip).
// scratch: chunk * V floats.
void logprob_forward(float* logp, float* lse, float* entropy, const float* h, const float* W, const int32_t* targets,
                     int N, int C, int V, float* scratch, int chunk);
// dh (N, C) = sum_v dz[n, v] W[v, :] (overwritten), with
//   dz = dlogp[n] * (onehot(target) - p) + dentropy[n] * (-p * (log p + entropy[n])).
// dentropy/entropy may be null (no entropy term). W is frozen: no weight gradient.
// Recomputes each chunk's logits from h and the saved lse.
void logprob_backward(float* dh, const float* dlogp, const float* dentropy, const float* h, const float* W,
                      const int32_t* targets, const float* lse, const float* entropy, int N, int C, int V,
                      float* scratch, int chunk);
// Full logits for a few rows (sampling): z (N, V) = h W^T.
void logits_forward(float* z, const float* h, const float* W, int N, int C, int V);
}  // namespace mcprl
