/**
 * Packing a training batch into micro-batches for the native trainer, with each sequence's loss weight.
 */
import { McprlError } from '../util/errors.js';
import type { LossConfig, TrainSequence } from './train-types.js';

/** One packed micro-batch in the native trainer's input form (see native/train/train_napi.cc). */
export interface NativeMicroBatch {
  tokens: Int32Array; cuSeqlens: Int32Array; lossRows: Int32Array; lossTargets: Int32Array;
  oldLogprobs: Float32Array | null; isWeights: Float32Array | null; seqOff: Int32Array; seqN: Int32Array; seqAdv: Float32Array; seqWeight: Float32Array;
  /** 1 / temperature per loss row; null when every sequence is at temperature 1. */
  lossInvTemp: Float32Array | null;
  /** Index of each loss row's allowed set in `masks`, −1 for none; both null when no row is masked. */
  lossMaskIdx: Int32Array | null;
  masks: Uint32Array | null;
}

/**
 * Splits a batch into packed micro-batches and computes each sequence's loss weight (see native/train/loss.h):
 * grpo 1/(G n_s), dapo/cispo/sft 1/N, dr_grpo 1/(G Lmax), gspo 1/G, with G sequences and N loss tokens in the
 * whole batch. Exported for tests.
 */
export function packBatch(batch: TrainSequence[], loss: LossConfig, microBatchTokens: number): { microBatches: NativeMicroBatch[]; totalTokens: number; lossTokens: number } {
  if (batch.length === 0) throw new McprlError('TRAIN_INVALID_BATCH', 'empty batch');
  const counts = batch.map((s, i) => {
    if (s.tokenIds.length < 2) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${i}: needs at least 2 tokens`);
    if (s.mask.length !== s.tokenIds.length) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${i}: mask has ${s.mask.length} entries for ${s.tokenIds.length} tokens`);
    if (s.mask[0]) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${i}: mask[0] must be 0 (the first token has no prediction)`);
    if (s.oldLogprobs && s.oldLogprobs.length !== s.tokenIds.length) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${i}: oldLogprobs has ${s.oldLogprobs.length} entries for ${s.tokenIds.length} tokens`);
    if (s.isWeights && (s.isWeights.length !== s.tokenIds.length || !s.isWeights.every((w) => Number.isFinite(w) && w >= 0))) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${i}: isWeights needs one finite, non-negative weight per token`);
    if (s.advantage !== undefined && !Number.isFinite(s.advantage)) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${i}: advantage is not finite`);
    if (s.temperature !== undefined && !(s.temperature > 0 && Number.isFinite(s.temperature))) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${i}: temperature must be positive, got ${s.temperature}`);
    if (s.tokenMasks && s.tokenMasks.length !== s.tokenIds.length) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${i}: tokenMasks has ${s.tokenMasks.length} entries for ${s.tokenIds.length} tokens`);
    let n = 0;
    for (const m of s.mask) if (m) n++;
    return n;
  });
  const G = batch.length;
  const N = counts.reduce((a, b) => a + b, 0);
  if (N === 0) throw new McprlError('TRAIN_INVALID_BATCH', 'no token in the batch carries loss (every mask is 0)');
  const Lmax = loss.maxLength ?? Math.max(...counts);
  const weight = (n: number) => {
    switch (loss.kind) {
      case 'grpo': return n > 0 ? 1 / (G * n) : 0;
      case 'dapo': case 'cispo': case 'sft': return 1 / N;
      case 'dr_grpo': return 1 / (G * Lmax);
      case 'gspo': return 1 / G;
    }
  };
  const anyOld = batch.some((s) => s.oldLogprobs);
  const anyTemp = batch.some((s) => s.temperature !== undefined && s.temperature !== 1);
  const anyMask = batch.some((s) => s.tokenMasks?.some((m) => m));
  const words = anyMask ? batch.flatMap((s) => s.tokenMasks ?? []).find((m) => m)!.length : 0;
  if (anyOld && !batch.every((s) => s.oldLogprobs)) throw new McprlError('TRAIN_INVALID_BATCH', 'oldLogprobs must be given for every sequence of a batch or for none');
  const anyWeights = batch.some((s) => s.isWeights);
  if (anyWeights && !batch.every((s) => s.isWeights)) throw new McprlError('TRAIN_INVALID_BATCH', 'isWeights must be given for every sequence of a batch or for none');

  const microBatches: NativeMicroBatch[] = [];
  let i = 0;
  let totalTokens = 0;
  while (i < G) {
    const group: number[] = [];
    let T = 0;
    while (i < G && (group.length === 0 || T + batch[i].tokenIds.length <= microBatchTokens)) {
      T += batch[i].tokenIds.length;
      group.push(i++);
    }
    totalTokens += T;
    const M = group.reduce((a, g) => a + counts[g], 0);
    const mb: NativeMicroBatch = {
      tokens: new Int32Array(T), cuSeqlens: new Int32Array(group.length + 1), lossRows: new Int32Array(M),
      lossTargets: new Int32Array(M), oldLogprobs: anyOld ? new Float32Array(M) : null, isWeights: anyWeights ? new Float32Array(M) : null,
      seqOff: new Int32Array(group.length), seqN: new Int32Array(group.length), seqAdv: new Float32Array(group.length),
      seqWeight: new Float32Array(group.length),
      lossInvTemp: anyTemp ? new Float32Array(M) : null, lossMaskIdx: anyMask ? new Int32Array(M) : null, masks: null,
    };
    const maskIndex = new Map<Uint32Array, number>();
    let row = 0, j = 0;
    group.forEach((g, k) => {
      const s = batch[g];
      mb.tokens.set(s.tokenIds, row);
      mb.seqOff[k] = j;
      mb.seqN[k] = counts[g];
      mb.seqAdv[k] = s.advantage ?? 0;
      mb.seqWeight[k] = weight(counts[g]);
      for (let t = 1; t < s.tokenIds.length; t++) {
        if (!s.mask[t]) continue;
        mb.lossRows[j] = row + t - 1;
        mb.lossTargets[j] = s.tokenIds[t];
        if (mb.oldLogprobs) mb.oldLogprobs[j] = s.oldLogprobs![t];
        if (mb.isWeights) mb.isWeights[j] = s.isWeights![t];
        if (mb.lossInvTemp) mb.lossInvTemp[j] = 1 / (s.temperature ?? 1);
        if (mb.lossMaskIdx) {
          const m = s.tokenMasks?.[t] ?? null;
          let k = -1;
          if (m) {
            if (m.length !== words) throw new McprlError('TRAIN_INVALID_BATCH', `sequence ${g}: token ${t}'s mask has ${m.length} words, others ${words}`);
            k = maskIndex.get(m) ?? maskIndex.size;
            maskIndex.set(m, k);
          }
          mb.lossMaskIdx[j] = k;
        }
        j++;
      }
      row += s.tokenIds.length;
      mb.cuSeqlens[k + 1] = row;
    });
    if (mb.lossMaskIdx) {
      mb.masks = new Uint32Array(Math.max(1, maskIndex.size) * words);
      for (const [m, k] of maskIndex) mb.masks.set(m, k * words);
    }
    microBatches.push(mb);
  }
  return { microBatches, totalTokens, lossTokens: N };
}
