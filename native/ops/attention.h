#pragma once
namespace mcprl {
// One run of queries that attend causally to one key/value sequence.
// Query i of the segment (0-based) sits at position npast + i and sees keys 0 .. npast + i.
// Packed training/scoring: one segment per sequence, npast = 0, k/v point at that sequence's first row
// of the packed k/v. Generation: k/v point at the sequence's KV cache (already holding the new rows).
struct AttnSegment {
  int q0 = 0;              // first query row in q/out
  int nq = 0;              // number of query rows
  int npast = 0;           // keys before the first query
  const float* k = nullptr;  // (npast + nq, Hkv, D)
  const float* v = nullptr;  // (npast + nq, Hkv, D)
};

// out (T, H, D) = softmax(q k^T / sqrt(D)) v per segment, grouped-query: head h reads kv head h / (H / Hkv).
// lse (T, H) = log-sum-exp of each softmax row, saved so backward can recompute the probabilities
// (flash-attention style) instead of keeping (H, T, T) probabilities. lse may be null (inference).
// Batch-invariant: a row's out and lse are bit-identical whatever else is in the call, including the same
// sequence's rows split over calls with npast (see attention.cc). The tiles keep per-thread buffers of their
// own, so callers pass no scratch.
void attention_forward(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H, int Hkv,
                       int D);

// Packed sequences only (npast = 0, k/v rows in the same packing as q): cu_seqlens (nseq + 1) row offsets.
// dq (T, H, D), dk (T, Hkv, D), dv (T, Hkv, D) overwritten. Needs q, k, v, out, lse from forward.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* cu_seqlens, int nseq, int H,
                        int Hkv, int D);

// The same two products one query row at a time in double precision: the oracle of the gradcheck (slow).
void attention_forward_reference(float* out, float* lse, const float* q, const AttnSegment* segs, int nseg, int H,
                                 int Hkv, int D);
void attention_backward_reference(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                  const float* v, const float* out, const float* lse, const int* cu_seqlens, int nseq,
                                  int H, int Hkv, int D);
}  // namespace mcprl
