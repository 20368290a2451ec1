// Training on top of the model forward (native/model/model.h): per-token log-probabilities of the loss tokens,
// the GRPO/SFT loss (loss.h), and the backward pass through every layer down to each LoRA A and B.
// Frozen base weights get no gradient buffers: the backward computes activation gradients through them
// (dx = dy W) and parameter gradients only for the adapter, into one flat buffer laid out exactly like
// LoraAdapter::memory (so gradient clipping and AdamW are single loops over it).
//
// Backward rule (as in the ops): parameter grads +=, activation grads =.
#pragma once
#include <cstdint>
#include <vector>

#include "../model/model.h"
#include "loss.h"

namespace mcprl {

// One packed micro-batch: several sequences back to back, attention never crosses their boundaries.
struct MicroBatch {
  std::vector<int32_t> tokens;      // (T) all sequences concatenated
  std::vector<int> cu_seqlens;      // (nseq + 1) row offsets
  // Loss tokens, compact, sequence after sequence: row[j] is the hidden row that predicts target[j]
  // (row = position of the token − 1 within the packing).
  std::vector<int32_t> loss_rows;   // (M)
  std::vector<int32_t> loss_targets;  // (M)
  std::vector<float> old_logp;      // (M) or empty: ratio 1 (old = current, detached)
  std::vector<float> is_weight;     // (M) or empty: importance weight of each loss token's policy term (loss.h)
  // The distribution each loss token was sampled from (lm_head.h): 1 / temperature per row, and an index into
  // `masks` (bitsets over the vocabulary, ceil(V / 32) words each) or −1; either may be empty (T = 1, no mask).
  std::vector<float> loss_inv_temp;   // (M) or empty
  std::vector<int32_t> loss_mask_idx; // (M) or empty
  std::vector<uint32_t> masks;        // (nmasks, words)
  std::vector<LossSeq> seqs;        // (nseq) offsets into the compact loss rows, advantage, weight
};

// Scratch for one micro-batch's backward; one flat allocation with named views, grown on demand.
struct TrainWork {
  FloatBuffer memory;
  int T_cap = 0, M_cap = 0, r_cap = 0, chunk = 0;
  float *dres, *dxn, *dtmp;              // (T, C)
  float *dact, *dgate, *dup;             // (T, I)
  float *datt, *dq, *dqpre;              // (T, H*D)
  float *dk, *dkpre, *dv;                // (T, Hkv*D)
  float* dh;                             // (T, r) LoRA scratch
  std::vector<float> fold_gw;            // (out, in) a folded adapter's dense gradient of one projection (host)
  float *hsel, *dhsel;                   // (M, C) gathered LM-head inputs and their gradient
  float* lm_g;                           // (M, C) p^T W per loss row, saved by lm_head_forward
  float *logp, *lse, *ent, *dlogp, *ref; // (M)
  float* lm_scratch;                     // (chunk, V) one chunk of logits
  RunState rs;                           // activations of the training forward (every layer saved)
  RunState rs_ref;                       // the adapter-free reference forward (nothing saved)
  RunState rs_rc;                        // recompute mode: one layer's activations, shared by all layers
  FloatBuffer ckpt;                      // recompute mode: (L, T, C) each layer's input
  // Where the backend's memory is not the host's: the micro-batch's loss-token arrays copied there, and the
  // loss's inputs and output copied back (the loss runs on the host over M values).
  IntBuffer stage_rows, stage_targets, stage_mask_idx;
  FloatBuffer stage_inv_temp;
  MaskBuffer stage_masks;
  std::vector<float> host_logp, host_ent, host_ref, host_dlogp;
};

// The result of one micro-batch: loss sums (LossStats) and entropy sum over its loss tokens.
struct MicroResult {
  LossStats loss;
  double entropy_sum = 0;
};

// Runs forward (and, when `grad` is non-null, backward) of one micro-batch. Gradients are ADDED into
// grad (layout of a.memory). The KL reference forward runs only when p.beta > 0.
// logp_out (M) receives the current log-probabilities of the loss tokens when non-null.
// recompute: keep only each layer's input (T, C) in the forward and recompute the layer's activations just
// before its backward (one extra forward of the layers; activation memory of one layer instead of all).
MicroResult train_micro_batch(Model& m, const LoraAdapter* a, float* grad, const MicroBatch& mb,
                              const LossParams& p, TrainWork& w, float* logp_out, bool recompute);

}  // namespace mcprl
