/**
 * Asynchronous rollouts (`maxStaleness` N ≥ 1): each step's groups are gathered ahead of the trainer, one gather at a
 * time, the next starting as soon as the previous ends, as PipelineRL and AReaL bound their lag.
 *
 * Adapter k is the one published after step k (0: untrained), and step t trains adapter t − 1. A gather for step t
 * may start once adapter t − 1 − N is published: its rollouts are then sampled by adapters at most N steps older
 * than the one they train, so staleness stays within N by construction. The trainer still checks every group
 * (staleOf) and regathers one past N, which only a server answering with an older adapter than it was asked for,
 * or `ahead` set beyond N (tests), can produce.
 */
import type { McpTrajectory } from '../agent/trajectory.js';

export class GatherAhead<T> {
  private readonly results = new Map<number, Promise<T>>();
  private readonly abort = new AbortController();
  private next: number;
  private admitted: number;
  private running: Promise<void> | null = null;
  private stopped = false;

  /**
   * `gather(step, signal)` gathers one step's groups; `published` is the adapter served now (the step before
   * `next`), `last` the last step to gather, `ahead` how many adapters a gather may run behind the one it trains.
   */
  constructor(
    private readonly gather: (step: number, signal: AbortSignal) => Promise<T>,
    private readonly o: { published: number; last: number; ahead: number },
  ) {
    this.next = o.published + 1;
    this.admitted = o.published + 1 + o.ahead;
    this.pump();
  }

  /** The step's groups: gathered ahead, or (a step not yet started) gathered now. */
  async take(step: number): Promise<T> {
    if (step >= this.next) this.admitted = Math.max(this.admitted, step);
    this.pump();
    // The previous gather may not have handed over yet (it settles a few microtasks after its result): wait for it.
    while (!this.results.has(step)) {
      if (step < this.next || !this.running) throw new Error(`gather-ahead: step ${step} was taken already, or cannot be gathered (next ${this.next}, last ${this.o.last})`);
      await this.running;
    }
    const r = this.results.get(step)!;
    this.results.delete(step);
    return r;
  }

  /** Adapter `step` is published: gathers of steps up to step + 1 + ahead may start. */
  published(step: number): void {
    this.admitted = Math.max(this.admitted, step + 1 + this.o.ahead);
    this.pump();
  }

  /** Starts no more gathers, aborts the one running and waits for it to settle; results not taken are lost. */
  async close(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    for (const r of this.results.values()) r.catch(() => undefined);
    this.results.clear();
    await this.running;
  }

  private pump(): void {
    if (this.running || this.stopped || this.next > this.admitted || this.next > this.o.last) return;
    const step = this.next++;
    const r = this.gather(step, this.abort.signal);
    // A failed gather fails the step that takes it; none is started after it.
    r.catch(() => (this.stopped = true));
    this.results.set(step, r);
    this.running = r.then(() => undefined, () => undefined).then(() => {
      this.running = null;
      this.pump();
    });
  }
}

/**
 * How many steps older than `trained` the oldest adapter that sampled the group was (0 for a group without a
 * recorded policy step: an in-process or failed rollout).
 */
export function staleOf(group: McpTrajectory[], trained: number): number {
  return Math.max(0, ...group.map((t) => (t.policy_step === undefined ? 0 : trained - t.policy_step)));
}
