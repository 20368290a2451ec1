// The CUDA engine's model-level check (issue 17): the model and trainer of native/model and native/train, unchanged,
// run on the CUDA backend after Model::to_backend / lora_to_backend. No Node: a standalone program, as check.cu.
// One JSON line per figure on stdout.
//
//   parity DIR   DIR/model (an HF Qwen3 folder), DIR/adapter (a PEFT LoRA adapter) and DIR/batch.json (a packed
//                micro-batch; scripts/device-model-check.py prepare writes all three). For the CUDA backend
//                (weights as stored, bf16) and the CPU backend (f32): the loss tokens' log-probabilities with and
//                without the adapter and the LoRA gradients of one GRPO loss, written to DIR/<backend>.*.f32 with
//                DIR/<backend>.json (the gradient's tensors in order), for the script's compare step (PyTorch +
//                transformers + peft on the same GPU).
//   staged MODEL No GPU needed: the same computation on the CPU backend twice, once as is and once with its
//                memory declared "elsewhere" (host buffers handed out through an Allocator), so every staging,
//                copy and transfer path the CUDA backend relies on runs; both must agree bit for bit.
//   bench SHAPE  Random bf16 weights of a Qwen3 shape (0.6b, 4b) made on the device: a LoRA GRPO train step
//                (forward, LM head and loss, backward, AdamW) over 4096 packed tokens (with the f32 attention
//                kernels, then with the tensor-core ones, the default), and decode steps at batch 1
//                and 64 (forward + LM-head logits, no sampling: the device sampler is not built). Seconds, tokens/s,
//                the FLOPs counted, bytes read per decode step, and device memory.
// Exit status: 0 done (parity and staged: every comparison that this program makes held), 1 otherwise, 2 no GPU.
#include <cstdio>
#include <string>

#include "model_check.cuh"

using namespace model_check;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s parity DIR | staged MODEL_DIR | bench 0.6b|4b\n", argv[0]);
    return 64;
  }
  const string mode = argv[1];
  try {
    if (mode == "staged") return run_staged(argv[2]);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      std::printf("{\"figure\":\"cuda.model\",\"ok\":false,\"error\":\"no CUDA device\"}\n");
      return 2;
    }
    if (mode == "parity") return run_parity(argv[2]);
    if (mode == "bench") return run_bench(argv[2]);
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 64;
  } catch (const std::exception& e) {
    std::printf("{\"figure\":\"cuda.model.%s\",\"ok\":false,\"error\":%s}\n", mode.c_str(), Json(e.what()).dump().c_str());
    return 1;
  }
}
