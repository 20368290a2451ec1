// Policy-gradient (GRPO family) and SFT losses on per-token log-probabilities, with their gradient
// d loss / d logπ(token). The model forward produces logπ for the loss-carrying (masked) tokens only; the
// model backward turns dlogp into gradients of every LoRA tensor.
//
// Token layout: the loss tokens of a micro-batch are stored compactly, sequence after sequence; sequence s
// owns rows [off, off + n). All batch-level normalisers (number of sequences G in the whole batch, total
// loss tokens N in the whole batch, the dr_grpo max length) are folded into LossSeq::weight by the caller
// before any micro-batch runs, so summing micro-batch losses and gradients gives exactly the whole-batch loss
// (token-count-aware accumulation).
//
// Definitions (ρ_t = exp(logπ_t − logπold_t), A = the sequence's advantage, k3_t = exp(r_t) − r_t − 1 with
// r_t = logπref_t − logπ_t, clip(ρ) = clamp(ρ, 1 − ε_low, 1 + ε_high)):
//   grpo     L = 1/G Σ_s 1/n_s Σ_t [−min(ρA, clip(ρ)A) + β k3]           (weight = 1 / (G n_s))
//   dapo     L = 1/N Σ_s Σ_t [−min(ρA, clip(ρ)A) + β k3]                  (weight = 1 / N)
//   dr_grpo  L = 1/(G Lmax) Σ_s Σ_t [−min(ρA, clip(ρ)A) + β k3]           (weight = 1 / (G Lmax))
//   cispo    L = 1/N Σ_s Σ_t [−sg(min(ρ, ε_max)) A logπ + β k3]            (weight = 1 / N)
//   gspo     L = 1/G Σ_s [−min(σA, clip(σ)A) + β mean_t k3], σ_s = exp(mean_t(logπ − logπold))  (weight = 1/G)
//   sft      L = 1/N Σ_s Σ_t −logπ                                          (weight = 1 / N)
// With importance weights w_t (truncated importance sampling, for tokens sampled by another engine than the
// trainer's), each token's policy term and its gradient are multiplied by w_t (gspo: the sequence term by the
// mean w_t of its tokens); the KL term is not. Without them, w_t = 1.
#pragma once
#include <cstdint>

namespace mcprl {

enum LossKind : int { LOSS_GRPO = 0, LOSS_DAPO = 1, LOSS_DR_GRPO = 2, LOSS_CISPO = 3, LOSS_GSPO = 4, LOSS_SFT = 5 };

// Every value comes from the caller (the TypeScript LossConfigSchema holds the defaults).
struct LossParams {
  int kind;             // LossKind
  float eps_low;        // clip ε below 1
  float eps_high;       // clip ε above 1
  float beta;           // KL coefficient (k3 against the adapter-free model)
  float cispo_eps_max;  // CISPO's cap on the importance weight
};

struct LossSeq {
  int off = 0;       // first compact loss row of this sequence
  int n = 0;         // loss tokens of this sequence
  float adv = 0.0f;  // advantage
  float weight = 0.0f;  // normaliser (see above)
};

// Sums over the micro-batch, so that adding them over micro-batches gives whole-batch figures.
struct LossStats {
  double loss = 0;         // Σ weighted total loss (policy + β KL)
  double policy_loss = 0;  // Σ weighted policy part
  double kl_sum = 0;       // Σ_t k3_t (unweighted; divide by tokens for the mean)
  double ratio_sum = 0;    // Σ_t ρ_t (σ_s per token for gspo)
  double clipped = 0;      // tokens where clipping (or the CISPO cap) is active
  double tokens = 0;       // loss tokens
  double nll_sum = 0;      // Σ_t −logπ_t
};

// dlogp (rows) = d L / d logπ, overwritten. old_logp may be null (=> old = logπ detached, ratio 1);
// is_w may be null (every weight 1); ref_logp may be null (no KL term; beta must then be 0). Stats are ADDED
// to *st.
void loss_forward_backward(LossStats* st, float* dlogp, const float* logp, const float* old_logp, const float* is_w,
                           const float* ref_logp, const LossSeq* seqs, int nseq, const LossParams& p);

}  // namespace mcprl
