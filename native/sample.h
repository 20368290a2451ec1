// Token sampling from one row of logits.
#pragma once
#include <cstdint>
#include <vector>

namespace mcprl {

// Every value comes from the caller (the TypeScript SamplingParams hold the defaults).
struct SampleParams {
  float temperature;  // <= 0: greedy (argmax)
  float top_p;        // nucleus mass, 1 = off
  int top_k;          // 0 = off
};

// splitmix64: the per-sequence RNG (state advanced in place).
uint64_t rng_next(uint64_t& state);
uint64_t rng_seed(uint64_t seed, uint64_t stream);

// Samples a token from logits z (V) with temperature -> top_k -> top_p, and returns in *logprob the
// token's log-probability under the model at temperature 1 with no truncation (log softmax(z)[token]):
// the policy's log pi that training uses, independent of how the token was sampled.
// idx: scratch of V ints.
int sample_token(const float* z, int V, const SampleParams& p, uint64_t& rng, float* logprob, std::vector<int>& idx);

}  // namespace mcprl
