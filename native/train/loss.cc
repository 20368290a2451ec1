// GRPO-family and SFT losses (definitions in loss.h). Serial on purpose: O(tokens) work, and a fixed
// summation order keeps losses bit-for-bit reproducible across runs and resumes.
#include "loss.h"

#include <algorithm>
#include <cmath>

#include "../core/common.h"

namespace mcprl {

// −min(ρA, clip(ρ)A) and its derivative w.r.t. log ρ. The clipped branch has zero gradient; it is the
// minimum exactly when A > 0 and ρ > 1 + ε_high, or A < 0 and ρ < 1 − ε_low.
static inline double clipped_term(double rho, double A, double lo, double hi, double* dlogrho, bool* clipped) {
  double unclipped = rho * A;
  double c = std::min(std::max(rho, lo), hi) * A;
  *clipped = (A > 0 && rho > hi) || (A < 0 && rho < lo);
  *dlogrho = *clipped ? 0.0 : -rho * A;
  return -std::min(unclipped, c);
}

void loss_forward_backward(LossStats* st, float* dlogp, const float* logp, const float* old_logp, const float* is_w,
                           const float* ref_logp, const LossSeq* seqs, int nseq, const LossParams& p) {
  CHECK(p.kind >= LOSS_GRPO && p.kind <= LOSS_SFT, "unknown loss kind " + std::to_string(p.kind));
  CHECK(p.beta == 0.0f || ref_logp, "KL coefficient beta > 0 needs reference log-probabilities");
  const double lo = 1.0 - p.eps_low, hi = 1.0 + p.eps_high, beta = p.beta;
  for (int s = 0; s < nseq; ++s) {
    const LossSeq& q = seqs[s];
    if (q.n == 0) continue;
    const double w = q.weight, A = q.adv;
    const float* lp = logp + q.off;
    const float* olp = old_logp ? old_logp + q.off : nullptr;
    const float* iw = is_w ? is_w + q.off : nullptr;
    const float* rlp = ref_logp ? ref_logp + q.off : nullptr;
    float* g = dlogp + q.off;
    st->tokens += q.n;

    // KL (k3) part, shared by the policy losses: per token β k3, weighted like the policy term
    // (gspo: mean over the sequence's tokens, then the sequence weight).
    const double kl_w = p.kind == LOSS_GSPO ? w / q.n : w;
    double kl_seq = 0;
    for (int t = 0; t < q.n; ++t) {
      st->nll_sum += -(double)lp[t];
      double dk = 0;
      if (rlp) {
        double r = (double)rlp[t] - lp[t];
        double er = std::exp(r);
        kl_seq += er - r - 1.0;
        dk = 1.0 - er;  // d k3 / d logπ
      }
      g[t] = p.kind == LOSS_SFT ? 0.0f : (float)(beta * kl_w * dk);
    }
    st->kl_sum += kl_seq;
    const double kl_loss = p.kind == LOSS_SFT ? 0.0 : beta * kl_w * kl_seq;

    double pol = 0;
    switch (p.kind) {
      case LOSS_SFT:
        for (int t = 0; t < q.n; ++t) {
          pol += -(double)lp[t];
          g[t] = (float)-w;
          st->ratio_sum += 1.0;
        }
        pol *= w;
        break;
      case LOSS_GRPO:
      case LOSS_DAPO:
      case LOSS_DR_GRPO:
        for (int t = 0; t < q.n; ++t) {
          double rho = olp ? std::exp((double)lp[t] - olp[t]) : 1.0;
          double d;
          bool c;
          const double wt = iw ? (double)iw[t] : 1.0;
          pol += wt * clipped_term(rho, A, lo, hi, &d, &c);
          g[t] += (float)(w * wt * d);
          st->ratio_sum += rho;
          st->clipped += c;
        }
        pol *= w;
        break;
      case LOSS_CISPO:
        for (int t = 0; t < q.n; ++t) {
          double rho = olp ? std::exp((double)lp[t] - olp[t]) : 1.0;
          double coef = std::min(rho, (double)p.cispo_eps_max) * (iw ? (double)iw[t] : 1.0);  // stop-gradient weight
          pol += -coef * A * lp[t];
          g[t] += (float)(-w * coef * A);
          st->ratio_sum += rho;
          st->clipped += rho > p.cispo_eps_max;
        }
        pol *= w;
        break;
      case LOSS_GSPO: {
        double mlr = 0, mw = 0;
        for (int t = 0; t < q.n; ++t) {
          mlr += olp ? (double)lp[t] - olp[t] : 0.0;
          mw += iw ? (double)iw[t] : 1.0;
        }
        mlr /= q.n;
        mw /= q.n;
        double sigma = std::exp(mlr), d;
        bool c;
        pol = w * mw * clipped_term(sigma, A, lo, hi, &d, &c);
        // d σ-term / d logπ_t = d/d log σ × 1/n
        for (int t = 0; t < q.n; ++t) g[t] += (float)(w * mw * d / q.n);
        st->ratio_sum += sigma * q.n;
        st->clipped += c ? q.n : 0;
        break;
      }
    }
    st->policy_loss += pol;
    st->loss += pol + kl_loss;
  }
}

}  // namespace mcprl
