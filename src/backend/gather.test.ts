import { describe, expect, it } from 'vitest';
import { BackendError } from './errors.js';
import { GatherError, gatherTrajectoryGroups } from './gather.js';

const trajectory = (reward: number) => ({ messages: [{ role: 'user' as const, content: 'hi' }], reward });

describe('gatherTrajectoryGroups', () => {
  it('makes one group per item, attempts in order, with progress for every rollout', async () => {
    const progress: number[] = [];
    const groups = await gatherTrajectoryGroups([10, 20], async (item, ctx) => trajectory(item + ctx.attempt), {
      perGroup: 3,
      concurrency: 2,
      onProgress: (e) => progress.push(e.done),
    });
    expect(groups.map((g) => g.trajectories.map((t) => t.reward))).toEqual([[10, 11, 12], [20, 21, 22]]);
    expect(groups.map((g) => g.metadata.item)).toEqual([0, 1]);
    expect(progress.sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('leaves failed rollouts out while they stay within maxFailures', async () => {
    const failures: string[] = [];
    const groups = await gatherTrajectoryGroups(
      ['a', 'b'],
      async (item, ctx) => {
        if (item === 'b' && ctx.attempt === 1) throw new Error('boom');
        return trajectory(ctx.attempt);
      },
      { perGroup: 2, maxFailures: 1, onError: (f) => failures.push(`${f.item}/${f.attempt}`) },
    );
    expect(groups.map((g) => g.trajectories.length)).toEqual([2, 1]);
    expect(failures).toEqual(['1/1']);
  });

  it('stops past maxFailures and keeps the completed groups on the error', async () => {
    // One rollout at a time: item 0 completes before item 1's attempts fail.
    const err = await gatherTrajectoryGroups(
      [0, 1, 2],
      async (item) => {
        if (item === 1) throw new Error(`item ${item} failed`);
        return trajectory(item);
      },
      { perGroup: 2, concurrency: 1, maxFailures: 1 },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GatherError);
    const g = err as GatherError;
    expect(g.code).toBe('GATHER_FAILED');
    expect(g.failures.map((f) => f.item)).toEqual([1, 1]);
    expect(g.groups.map((x) => x.trajectories.length)).toEqual([2]);
    expect(g.message).toMatch(/item 1 failed/);
  });

  it('counts a rollout that returns a malformed trajectory as failed, naming the field', async () => {
    const err = await gatherTrajectoryGroups([0], async () => ({ messages: [], reward: 1 }), { perGroup: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GatherError);
    const cause = (err as GatherError).failures[0].error as BackendError;
    expect(cause.field).toBe('rollout(item 0, attempt 0).messages');
  });

  it('aborts a rollout that runs past timeoutMs and counts it as failed', async () => {
    const seen: string[] = [];
    const groups = await gatherTrajectoryGroups(
      ['stuck', 'quick'],
      (item, ctx) =>
        item === 'quick'
          ? Promise.resolve(trajectory(1))
          : // Never settles by itself: only the timeout's abort can end it.
            new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true })),
      { perGroup: 1, maxFailures: 1, timeoutMs: 5, onError: (f) => seen.push((f.error as Error).message) },
    );
    expect(groups.map((g) => g.metadata.item)).toEqual([1]);
    expect(seen).toEqual(['rollout timed out after 5 ms']);
  });
});
