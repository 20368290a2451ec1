/**
 * The engine's automatic prefix cache (native/engine/prefix_cache.h): the KV of prompts prefilled earlier, in blocks of
 * `blockTokens` (64) tokens keyed by the ids up to each block's end and by the adapter's name and weights version,
 * so that a prompt that starts like an earlier one prefills only the rest — a GRPO group's rollouts share their
 * first prompt, and each turn's prompt starts with the last turn's. Results are bit-identical with the cache warm,
 * cold or off: prefill runs in the GEMM's blocked mode (native/kernels/gemm.h), where a row's bits do not depend on how the
 * rows were split into forwards, and only whole blocks at fixed positions (or a prompt's last) are cached.
 */
import { z } from 'zod';

/**
 * The cache's memory budget in MiB (least recently used blocks are dropped beyond it); 0 turns it off. Default
 * 1024. A block of the bundled tiny model takes 128 KiB; one of a Qwen3-0.6B-shaped model, 14 MiB.
 */
export const PrefixCacheMibSchema = z.number().int().min(0).max(1 << 20).default(1024);
export type PrefixCacheMib = z.input<typeof PrefixCacheMibSchema>;

/** Counters since the model loaded, and the cache's size now. */
export interface PrefixCacheStats {
  /** Prompts prefilled, and their tokens. */
  prompts: number;
  promptTokens: number;
  /** Prompt tokens whose KV came from the cache (in hitBlocks blocks): the prefill they saved. */
  hitTokens: number;
  hitBlocks: number;
  /** Prompt tokens computed by a forward (promptTokens − hitTokens). */
  prefilledTokens: number;
  insertedBlocks: number;
  /** Blocks dropped for room, or because their adapter was unloaded, replaced or trained. */
  evictedBlocks: number;
  /** The cache now: blocks, bytes held, and the budget. */
  blocks: number;
  bytes: number;
  capacityBytes: number;
  /** Tokens per block (the prefill chunk). */
  blockTokens: number;
}
