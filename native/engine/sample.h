// Token sampling from one row of logits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mcprl {

// Every value comes from the caller (the TypeScript SamplingParams hold the defaults).
struct SampleParams {
  float temperature;  // <= 0: greedy (argmax)
  float top_p;        // nucleus mass, 1 = off
  int top_k;          // 0 = off
  int top_logprobs;   // alternatives to report per token (see sample_token), 0 = none
};

// splitmix64: the per-sequence RNG (state advanced in place).
uint64_t rng_next(uint64_t& state);
uint64_t rng_seed(uint64_t seed, uint64_t stream);

// Allowed-token sets of a batch of rows: per row an index into `bits` (−1: no mask), the sets themselves
// ceil(V / 32) words each (bitsets over the vocabulary). Both empty: no row is masked.
struct TokenMasks {
  std::vector<int32_t> idx;    // (B) or empty
  std::vector<uint32_t> bits;  // (nmasks, words)
  // Row i's set, or null; fails when its index is out of range.
  const uint32_t* row(size_t i, int V) const;
};

// One batch's sampling settings, one entry per slot (the engine's sample and step; src/engine/native.ts
// BatchSampling): every field from the caller.
struct BatchSampling {
  std::vector<float> temperature, top_p;
  std::vector<int32_t> top_k, top_logprobs;
  TokenMasks masks;
};

// True when token v is in the allowed set `allow` (a bitset of ceil(V / 32) words; null allows every token).
inline bool token_allowed(const uint32_t* allow, int v) { return !allow || ((allow[v >> 5] >> (v & 31)) & 1u); }

// Samples a token from logits z (V) with allowed-set mask -> temperature -> top_k -> top_p. Returns two
// log-probabilities of the token:
//   *logprob          log softmax(z)[token]: the model's own log pi at temperature 1 over the whole vocabulary,
//                     whatever the sampling settings (what an OpenAI-style `logprobs` reports);
//   *sampler_logprob  log of the token's probability under the distribution it was drawn from before top-k /
//                     top-p truncation: softmax over the allowed tokens of z / T (T = 1 when greedy). The
//                     trainer computes exactly this (native/train/lm_head.h), so GRPO's ratio is 1 on policy.
// With p.top_logprobs = n > 0 it also writes the n most likely tokens of the distribution *logprob is taken
// from (log softmax(z) at temperature 1 over the whole vocabulary, the same float arithmetic), most likely
// first, ties by lower id: top_ids[0..n) and top_lps[0..n) (an OpenAI-style `top_logprobs`). They depend on z
// alone, so they are as batch-invariant as z, and they draw nothing from rng.
// allow: bitset of the allowed tokens, or null (all). An allowed set with no token in it is treated as null.
// idx: scratch of V ints.
int sample_token(const float* z, int V, const SampleParams& p, const uint32_t* allow, uint64_t& rng, float* logprob,
                 float* sampler_logprob, int32_t* top_ids, float* top_lps, std::vector<int>& idx);

}  // namespace mcprl
