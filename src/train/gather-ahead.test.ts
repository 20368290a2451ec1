import { describe, expect, it } from 'vitest';
import type { McpTrajectory } from '../agent/trajectory.js';
import { GatherAhead, staleOf } from './gather-ahead.js';

/** A gather the test finishes by hand: which steps started, and a way to end each one. */
function handGather() {
  const started: number[] = [];
  const finish = new Map<number, (v: string) => void>();
  const gather = (step: number) => {
    started.push(step);
    return new Promise<string>((resolve) => finish.set(step, resolve));
  };
  return { started, finish, gather };
}
// Lets every promise chain settle: the microtask queue drains before a macrotask runs (no I/O or timer is involved;
// every gather ends only when the test ends it).
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('GatherAhead', () => {
  it('runs one gather at a time, starting the next when the previous ends, at most `ahead` adapters behind', async () => {
    const h = handGather();
    const g = new GatherAhead(h.gather, { published: 0, last: 5, ahead: 1 });
    expect(h.started).toEqual([1]);
    h.finish.get(1)!('one');
    await settle();
    // Adapter 0 may sample step 2 (trained by adapter 1: one step stale), not step 3.
    expect(h.started).toEqual([1, 2]);
    expect(await g.take(1)).toBe('one');
    h.finish.get(2)!('two');
    await settle();
    expect(h.started).toEqual([1, 2]);
    g.published(1);
    await settle();
    expect(h.started).toEqual([1, 2, 3]);
    expect(await g.take(2)).toBe('two');
    h.finish.get(3)!('three');
    expect(await g.take(3)).toBe('three');
    await g.close();
  });

  it('gathers a step it is asked for at once, stops after `last`, and stops on a failed gather', async () => {
    const h = handGather();
    const g = new GatherAhead(h.gather, { published: 2, last: 3, ahead: 0 });
    expect(h.started).toEqual([3]);
    h.finish.get(3)!('three');
    expect(await g.take(3)).toBe('three');
    g.published(3);
    await settle();
    expect(h.started).toEqual([3]);
    await expect(g.take(4)).rejects.toThrow(/step 4 .*cannot be gathered/);

    const failing = new GatherAhead((step) => (step === 1 ? Promise.reject(new Error('pool empty')) : Promise.resolve(step)), { published: 0, last: 5, ahead: 3 });
    await expect(failing.take(1)).rejects.toThrow('pool empty');
    await settle();
    await expect(failing.take(2)).rejects.toThrow(/cannot be gathered/);
    await failing.close();
  });

  it('aborts the running gather on close', async () => {
    let aborted = false;
    const g = new GatherAhead((_step, signal) => new Promise<number>((resolve) => signal.addEventListener('abort', () => {
      aborted = true;
      resolve(0);
    })), { published: 0, last: 2, ahead: 1 });
    await g.close();
    expect(aborted).toBe(true);
  });
});

describe('staleOf', () => {
  const t = (policy_step?: number) => ({ ...(policy_step !== undefined ? { policy_step } : {}) }) as McpTrajectory;
  it('is the oldest sampling adapter\'s distance from the trained one; 0 without a recorded step', () => {
    expect(staleOf([t(3), t(1), t(2)], 3)).toBe(2);
    expect(staleOf([t(), t(4)], 4)).toBe(0);
    expect(staleOf([t()], 7)).toBe(0);
  });
});
