// Finite-difference checks of every op's backward, exposed to tests through the test addon (gradcheck()).
#pragma once
#include <string>
#include <vector>

namespace mcprl {

struct GradcheckResult {
  std::string input;    // which gradient, e.g. "dx", "dA"
  double max_abs_err;   // max |analytic - numeric| over the checked entries
  double max_abs_grad;  // max |numeric| over the checked entries (scale for the tolerance)
  int checked;          // entries checked
};

// Central differences (f(x+eps) - f(x-eps)) / (2 eps) of L = sum(out * w) for a random upstream w,
// at up to `samples` random entries of each input. Ops: rmsnorm, qknorm, rope, attention, attention_long (the
// tiles on long sequences, GQA 1/2/4, head_dim 8/64/128), swiglu, linear,
// lora, lm_head.
std::vector<GradcheckResult> gradcheck_op(const std::string& op, unsigned seed, double eps, int samples);

}  // namespace mcprl
