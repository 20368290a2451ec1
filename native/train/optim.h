// AdamW, global grad-norm clipping and learning-rate schedules on one flat parameter buffer (all LoRA A/B
// tensors of an adapter back to back), so an optimiser step is a single loop.
#pragma once
#include <cstddef>

namespace mcprl {

// Every value comes from the caller (the TypeScript OptimizerConfigSchema holds the defaults); the learning
// rate is an argument of adamw_step because the schedule changes it every step.
struct AdamWConfig {
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // decoupled
};

// One AdamW step exactly as torch.optim.AdamW (decoupled decay p -= lr*wd*p first; bias corrections
// 1 − β^step; denominator sqrt(v)/sqrt(bc2) + eps). step is 1-based (the step being taken).
// param, grad, m (first moment), v (second moment): n floats each.
void adamw_step(float* param, const float* grad, float* m, float* v, size_t n, long step, float lr,
                const AdamWConfig& c);

// Global L2 norm of the gradient, accumulated in double in a fixed order (reproducible).
double grad_norm(const float* grad, size_t n);

// Scales grad by max_norm / (norm + 1e-6) when that is < 1 (torch.nn.utils.clip_grad_norm_). Returns norm.
double clip_grad_norm(float* grad, size_t n, double max_norm);
// The same where the gradient lives in backend b's memory (the norm comes back to the host; the scaling runs there).
struct Backend;
double clip_grad_norm(const Backend& b, float* grad, size_t n, double max_norm);

}  // namespace mcprl
