#include "backend.h"
#include "gemm.h"
#include "ops/embedding.h"
#include "ops/lm_head.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"

namespace mcprl {

const Backend& cpu_backend() {
  static const Backend be = {
      "cpu",
      gemm,
      gemm_w,
      embedding_forward,
      rmsnorm_forward,
      rmsnorm_backward,
      rope_forward,
      rope_backward,
      attention_forward,
      attention_backward,
      swiglu_forward,
      swiglu_backward,
      linear_forward,
      linear_backward,
      lora_forward,
      lora_backward,
      lm_head_forward,
      lm_head_backward,
      logits_forward,
  };
  return be;
}

}  // namespace mcprl
