// The LM head + log-softmax for training, fused so that its backward needs no second pass over the
// vocabulary. For each loss row j with hidden h_j, logits z = h_j W^T (V), p = softmax(z):
//   logp_j = z[target_j] − logsumexp(z)
//   d logp_j / d h_j = W[target_j] − Σ_v p_v W_v = W[target_j] − g_j
// The forward saves g_j = p^T W (C floats per row) while p is at hand, so the backward is
//   dh_j = dlogp_j · (W[target_j] − g_j)
// for ANY upstream dlogp (the loss is computed between the two). Compared with recomputing the logits in the
// backward (native/ops/logprob.cc), this does two (N, V, C) products instead of three and one exponential per
// logit instead of two. Logits are never held whole: rows go through in chunks of `chunk`.
// Backward rule: parameter grads += (none: the head is frozen), activation grads =.
#pragma once
#include <cstdint>

namespace mcprl {

// logp (N), lse (N), entropy (N, may be null), g (N, C) = p^T W per row (may be null: no backward follows).
// h (N, C), W (V, C), targets (N) in [0, V). scratch: chunk * V floats.
void lm_head_forward(float* logp, float* lse, float* entropy, float* g, const float* h, const float* W,
                     const int32_t* targets, int N, int C, int V, float* scratch, int chunk);

// dh (N, C) = dlogp[n] * (W[targets[n]] − g[n]), overwritten.
void lm_head_backward(float* dh, const float* dlogp, const float* g, const float* W, const int32_t* targets, int N,
                      int C);

}  // namespace mcprl
