// The LM head + log-softmax: the one op that turns final hidden rows into log-probabilities, used by
// training (with backward), by scoring (forward only) and, as plain logits, by sampling.
//
// For each row n with hidden h_n, logits z = h_n W^T (V), p = softmax(z):
//   logp_n = z[target_n] − logsumexp(z)
//   d logp_n / d h_n = W[target_n] − Σ_v p_v W_v = W[target_n] − g_n
// The forward saves g_n = p^T W (C floats per row) while p is at hand, so the backward is
//   dh_n = dlogp_n · (W[target_n] − g_n)
// for ANY upstream dlogp (the loss is computed between the two). Compared with recomputing the logits in the
// backward, this does two (N, V, C) products instead of three and one exponential per logit instead of two.
// Logits are never held whole: rows go through in chunks of `chunk`, the vocabulary in tiles (below). The entropy
// is reported, not differentiated (no loss uses it).
//
// Each row may have its own sampling distribution: logits divided by a temperature T_n and restricted to an
// allowed set S_n of tokens (constrained decoding), p = softmax over S_n of z / T_n. Then
//   logp_n = z[target_n] / T_n − logsumexp_{v in S_n}(z_v / T_n)
//   d logp_n / d h_n = (W[target_n] − Σ_{v in S_n} p_v W_v) / T_n
// and the entropy is that of p. A row with T_n = 1 and no set is the plain log-softmax above, bit for bit.
// Backward rule: parameter grads += (none: the head is frozen), activation grads =.
#pragma once
#include <algorithm>
#include <cstdint>

#include "../core/weight.h"

namespace mcprl {

// The logits go through in tiles of (chunk rows) x (kLmHeadCols vocabulary columns) with an online log-sum-exp (as
// the CUDA op does): per row a running max and sums rescaled when the max moves, and g rescaled with them. A
// vocabulary of at most kLmHeadCols tokens is one tile, and the op is then the plain two-pass one.
constexpr int kLmHeadCols = 16384;
inline int lm_head_tile_cols(int V) { return std::max(1, std::min(V, kLmHeadCols)); }
// Rows per chunk for N rows against a vocabulary of V: 2^24 / lm_head_tile_cols(V) rows (64 MiB of f32 logits in
// scratch; 1,024 rows of Qwen's 151,936 tokens, so the head's weight is streamed through the products once per
// 1,024 rows), at least 1, at most N. The one size every caller uses (training, scoring, the bench): a chunk is one
// product of its rows, and the GEMM's rounding can depend on the row count.
inline int lm_head_chunk_rows(int V, int N) { return std::max(1, std::min(N, (1 << 24) / lm_head_tile_cols(V))); }
// Floats of scratch lm_head_forward needs for N rows: one tile.
inline size_t lm_head_scratch_floats(int V, int N) { return (size_t)lm_head_chunk_rows(V, N) * lm_head_tile_cols(V); }

// The fused path. Where the vocabulary spans several tiles (V > kLmHeadCols: real tokenizers; the bundled tiny
// model's 1,024 stays on the two-pass op, and so do its figures), on a CPU with AVX-512, with C a multiple of
// kLmHeadFusedRows, more than kGemmSmallRows rows, no allowed sets, and neither row-wise nor blocked GEMM mode on
// (gemm.h: their arithmetic is promised), lm_head_forward runs one loop per thread over its rows instead of two
// GEMMs around a logits buffer: per block of rows (h^T packed once, in panels of 32 rows) and per tile of
// vocab_rows rows of W (widened when 16-bit), z^T = W_tile h^T in register tiles, then per 16 rows (one vector lane
// each) the tempered tile max, the running max and sums moved, e = exp(z - max) in place, then g^T += W_tile^T E in
// the same register tiles, reading W_tile unpacked while it is still in cache. Neither product packs W, nothing
// zeroes or re-reads a logits buffer out of cache, and each row's figures are one fixed order of operations: they
// do not depend on how many rows share the call, on the thread count, or on the other rows (the scratch is unused).
constexpr int kLmHeadFusedRows = 8;  // W rows per register tile (and C's unit)
struct LmHeadFusedTiles {
  int vocab_rows;   // vocabulary rows per tile (a multiple of kLmHeadFusedRows)
  int token_block;  // rows of h per block
};
// The sizes every caller uses for a hidden size C: tile and block buffers that stay in a core's L2.
LmHeadFusedTiles lm_head_fused_tiles(int C);
bool lm_head_fused_available();  // an x86-64 build (the kernel is compiled in) on a CPU with AVX-512
bool lm_head_fused_applies(int N, int C, int V, const int32_t* mask_idx);
// The fused forward with the given tiles (the gradcheck runs small ones); no allowed sets.
void lm_head_forward_fused(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                           const int32_t* targets, int N, int C, int V, const float* inv_temp, LmHeadFusedTiles tiles);

// logp (N), lse (N), entropy (N, may be null), g (N, C) = p^T W per row (may be null: no backward follows).
// h (N, C), W (V, C) (the embedding when tied; f32 or 16-bit, widened in the products), targets (N) in [0, V).
// scratch: chunk * lm_head_tile_cols(V) floats (may be null where lm_head_fused_applies: the fused path reads none).
// inv_temp (N) 1 / T_n, or null (T = 1 everywhere). mask_idx (N) index of row n's allowed set in masks
// (nmasks, ceil(V / 32) words, bitsets), −1 for none; null for no sets. lse is of the tempered, masked logits.
// Saves for backward: g.
void lm_head_forward(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                     const int32_t* targets, int N, int C, int V, float* scratch, int chunk, const float* inv_temp,
                     const int32_t* mask_idx, const uint32_t* masks);

// The same with `cols` vocabulary columns per tile (scratch: chunk * cols floats): the gradcheck runs many tiles
// over a small vocabulary.
void lm_head_forward_tiles(float* logp, float* lse, float* entropy, float* g, const float* h, WeightRef W,
                           const int32_t* targets, int N, int C, int V, float* scratch, int chunk, int cols,
                           const float* inv_temp, const int32_t* mask_idx, const uint32_t* masks);

// dh (N, C) = dlogp[n] / T_n * (W[targets[n]] − g[n]), overwritten. Needs g from forward. inv_temp as above.
void lm_head_backward(float* dh, const float* dlogp, const float* g, WeightRef W, const int32_t* targets, int N,
                      int C, const float* inv_temp);

// Full logits for a few rows (sampling): z (N, V) = h (N, C) W^T.
void logits_forward(float* z, const float* h, WeightRef W, int N, int C, int V);

}  // namespace mcprl
