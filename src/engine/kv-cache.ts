/**
 * The engine's KV cache budget (issue 42 §3): the bytes that generation's caches may take, every sequence's slot and
 * the prefix cache (src/engine/prefix-cache.ts) together. A sequence reserves the keys and values of its whole
 * capacity (its prompt plus its max tokens, never past the model's context) when it is admitted: 2 × layers ×
 * capacity × kv_heads × head_dim × 4 bytes (the cache is f32). The scheduler (src/engine/model.ts) admits a request
 * only when its samples' reservations fit beside those of the sequences running, after taking the prefix cache's
 * blocks (which only ever get the room the reservations leave); otherwise the request waits, first come first
 * served, until sequences finish. A request that could not fit even alone is refused at once, and a model whose one
 * sequence at its full context does not fit is refused at load, both naming the bytes needed and those available.
 *
 * What the budget does not hold: the weights (counted at load against the memory available), a forward's activations
 * (bounded by the prefill and decode row counts, tens of MiB), and the trainer's activations. Those live only while a
 * training step runs, and no generation runs then (the backend holds inference while it trains: the slots are free
 * and only the prefix cache's blocks stay), which is why the default budget is half of what is available: the other
 * half is the step's, the process's own and the rest of the machine's.
 */
import { readFileSync } from 'node:fs';
import { freemem } from 'node:os';
import { z } from 'zod';

/**
 * The KV cache's budget in MiB: running sequences' caches and the prefix cache together; requests wait for room
 * beyond it. Default: half the memory available when the model loads (free memory, or the cgroup's limit less its
 * usage when that is less) less the weights, and never less than one sequence at the model's full context.
 */
export const KvCacheMibSchema = z.number().int().positive().max(1 << 30);
export type KvCacheMib = z.input<typeof KvCacheMibSchema>;

/** The share of the memory left after the weights that the default budget takes. */
export const KV_DEFAULT_SHARE = 0.5;

/** The KV cache's counters (native/engine/engine_state.h: KvCacheStats); read without waiting for the engine. */
export interface KvCacheStats {
  /** The budget in bytes. */
  budgetBytes: number;
  /** Reserved now by live sequences: each one's keys and values at its full capacity. */
  reservedBytes: number;
  /** Held now: the caches of sequences that have started, plus the prefix cache's blocks. */
  bytes: number;
  /** The most `bytes` has been since the model loaded. */
  peakBytes: number;
  /** Sequences whose cache is allocated now, and the most there have been at once. */
  slots: number;
  peakSlots: number;
}

/** A number from a cgroup file, or null (no such file, or `max`: no limit). */
function cgroupNumber(file: string): number | null {
  try {
    const n = Number(readFileSync(file, 'utf8').trim());
    return Number.isFinite(n) && n < 2 ** 60 ? n : null;
  } catch {
    return null;
  }
}

/**
 * Bytes this process may still take: free memory (Linux's MemAvailable, through libuv), or the cgroup's limit less
 * its usage (v2, else v1) when that is less.
 */
export function availableMemory(): number {
  let avail = freemem();
  for (const [max, cur] of [
    ['/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory.current'],
    ['/sys/fs/cgroup/memory/memory.limit_in_bytes', '/sys/fs/cgroup/memory/memory.usage_in_bytes'],
  ] as const) {
    const limit = cgroupNumber(max);
    const used = cgroupNumber(cur);
    if (limit !== null && used !== null) {
      avail = Math.min(avail, Math.max(0, limit - used));
      break;
    }
  }
  return avail;
}

/** Bytes in MiB with one decimal, for messages. */
export const mib = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

export interface KvBudgetInput {
  /** The budget asked for (KvCacheMibSchema), or undefined for the default. */
  kvCacheMib: number | undefined;
  /** Bytes available before the weights were loaded (availableMemory()). */
  available: number;
  /** Bytes of the weights as loaded. */
  weights: number;
  /** Bytes of one sequence's cache at the model's full context. */
  oneSequence: number;
  /** The model's context in tokens, and its folder (for messages). */
  context: number;
  dir: string;
}

/**
 * The budget in bytes, or the reason the model cannot be served: its weights and one sequence at its full context
 * do not fit the memory available, or the budget asked for cannot hold that one sequence.
 */
export function kvBudget(o: KvBudgetInput): { bytes: number } | { refused: string } {
  const need = o.weights + o.oneSequence;
  if (need > o.available) {
    return {
      refused:
        `${o.dir}: the model needs ${need} bytes (${mib(need)}: weights ${mib(o.weights)} + the KV cache of one sequence of its ` +
        `${o.context}-token context ${mib(o.oneSequence)}) but ${o.available} bytes (${mib(o.available)}) are available`,
    };
  }
  if (o.kvCacheMib !== undefined) {
    const bytes = KvCacheMibSchema.parse(o.kvCacheMib) * 2 ** 20;
    if (bytes < o.oneSequence) {
      return {
        refused:
          `${o.dir}: a KV cache budget of ${bytes} bytes (--kv-cache-mib ${o.kvCacheMib}) cannot hold one sequence of the model's ` +
          `${o.context}-token context, which needs ${o.oneSequence} bytes (${mib(o.oneSequence)}); ${o.available} bytes are available`,
      };
    }
    return { bytes };
  }
  return { bytes: Math.max(o.oneSequence, Math.floor((o.available - o.weights) * KV_DEFAULT_SHARE)) };
}
