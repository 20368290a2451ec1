// The backend seam filled with the CUDA ops (native/backend/backend.h): the same table, device pointers (see ops.h for
// the few arguments that differ in meaning: attention's host-side segment metadata, unused scratch buffers).
#include "ops.h"

namespace mcprl {

const Backend& cuda_backend() {
  static const Backend b = {
      "cuda",
      cuda::gemm,
      cuda::gemm_w,
      cuda::embedding_forward,
      cuda::rmsnorm_forward,
      cuda::rmsnorm_backward,
      cuda::rope_forward,
      cuda::rope_backward,
      cuda::attention_forward,
      cuda::attention_backward,
      cuda::swiglu_forward,
      cuda::swiglu_backward,
      cuda::linear_forward,
      cuda::linear_backward,
      cuda::lora_forward,
      cuda::lora_backward,
      cuda::lm_head_forward,
      cuda::lm_head_backward,
      cuda::logits_forward,
      &cuda::device_allocator(),
      cuda::copy,
      cuda::copy_rows,
      cuda::upload,
      cuda::download,
      cuda::zero,
      cuda::add,
      cuda::gather_rows,
      cuda::scatter_add_rows,
      cuda::norm,
      cuda::scale,
      cuda::adamw_step,
  };
  return b;
}

}  // namespace mcprl
