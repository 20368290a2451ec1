/**
 * Runs the application's rollout function many times in parallel and collects the results into groups: one
 * group per item (a task, a game seed), `perGroup` attempts each. A failed rollout (it threw, or ran past
 * `timeoutMs`) is left out of its group and counted; past `maxFailures` the gathering stops and throws
 * GATHER_FAILED, keeping the groups completed so far on the error, so no finished rollout is lost.
 */
import pLimit from 'p-limit';
import type { ProgressListener } from '../util/progress.js';
import { BackendError, parseInput } from './errors.js';
import { TrajectorySchema, type Trajectory, type TrajectoryGroup, type TrajectoryInput } from './schemas.js';

export interface GatherOptions {
  /** Attempts per item; they form one group. */
  perGroup: number;
  /** Rollouts running at once. Default 8. */
  concurrency?: number;
  /** Failed rollouts tolerated; one more stops the gathering with GATHER_FAILED. Default 0. */
  maxFailures?: number;
  /** A rollout still running after this many milliseconds is aborted (its signal fires) and counts as failed. Default none. */
  timeoutMs?: number;
  /** Receives `{phase: 'gather', done, total}` after every rollout. */
  onProgress?: ProgressListener;
  /** Receives each failure as it happens (the rollout's item index, attempt and error). */
  onError?: (failure: RolloutFailure) => void;
}

export interface RolloutFailure {
  item: number;
  attempt: number;
  error: unknown;
}

/** What a rollout function gets besides its item. */
export interface RolloutContext {
  /** Index of the item in `items`. */
  item: number;
  /** Which attempt at the item (0 … perGroup − 1). */
  attempt: number;
  /** Fires when the rollout should stop (timeout, or the gathering failed). */
  signal: AbortSignal;
}

/** GATHER_FAILED with what was completed before the failures ran out. */
export class GatherError extends BackendError {
  constructor(
    message: string,
    readonly groups: TrajectoryGroup[],
    readonly failures: RolloutFailure[],
  ) {
    super('GATHER_FAILED', message, { cause: failures[failures.length - 1]?.error });
  }
}

/**
 * One group per item (in the items' order; `metadata.item` is its index), each holding the attempts that
 * succeeded, in attempt order. Items whose every attempt failed have no group.
 */
export async function gatherTrajectoryGroups<T>(
  items: readonly T[],
  rollout: (item: T, ctx: RolloutContext) => Promise<TrajectoryInput>,
  opts: GatherOptions,
): Promise<TrajectoryGroup[]> {
  if (!Number.isInteger(opts.perGroup) || opts.perGroup < 1) {
    throw new BackendError('BACKEND_INVALID', `perGroup must be a positive integer, got ${opts.perGroup}`, { field: 'perGroup' });
  }
  const maxFailures = opts.maxFailures ?? 0;
  const limit = pLimit(opts.concurrency ?? 8);
  const stop = new AbortController();
  const results: (Trajectory | null)[][] = items.map(() => Array<Trajectory | null>(opts.perGroup).fill(null));
  const failures: RolloutFailure[] = [];
  const total = items.length * opts.perGroup;
  let done = 0;

  const groups = (): TrajectoryGroup[] =>
    results
      .map((attempts, item) => ({ trajectories: attempts.filter((t): t is Trajectory => t !== null), metadata: { item } }))
      .filter((g) => g.trajectories.length > 0);

  const runOne = async (item: number, attempt: number): Promise<void> => {
    if (stop.signal.aborted) return;
    const own = new AbortController();
    const onStop = () => own.abort(stop.signal.reason);
    stop.signal.addEventListener('abort', onStop, { once: true });
    const timer = opts.timeoutMs !== undefined ? setTimeout(() => own.abort(new Error(`rollout timed out after ${opts.timeoutMs} ms`)), opts.timeoutMs) : null;
    try {
      const raced = new Promise<never>((_, reject) => own.signal.addEventListener('abort', () => reject(own.signal.reason), { once: true }));
      raced.catch(() => undefined);
      const t = await Promise.race([rollout(items[item], { item, attempt, signal: own.signal }), raced]);
      results[item][attempt] = parseInput(TrajectorySchema, t, `rollout(item ${item}, attempt ${attempt})`);
    } catch (error) {
      if (stop.signal.aborted) return;
      const failure = { item, attempt, error };
      failures.push(failure);
      opts.onError?.(failure);
      if (failures.length > maxFailures) stop.abort(error);
    } finally {
      if (timer) clearTimeout(timer);
      stop.signal.removeEventListener('abort', onStop);
      done++;
      opts.onProgress?.({ phase: 'gather', step: 0, done, total, time: Date.now() });
    }
  };

  await Promise.all(items.flatMap((_, item) => Array.from({ length: opts.perGroup }, (_, attempt) => limit(() => runOne(item, attempt)))));
  if (failures.length > maxFailures) {
    const last = failures[failures.length - 1].error;
    throw new GatherError(
      `${failures.length} rollouts failed (maxFailures ${maxFailures}); the last: ${last instanceof Error ? last.message : String(last)}`,
      groups(),
      failures,
    );
  }
  return groups();
}
