/**
 * Served names for adapters that change while they are served (the library's trainable models).
 *
 * A trainable model answers to one stable name, while the adapter behind it is replaced after every training
 * step. A route maps the name to the adapter loaded now; a request resolves the route when it starts and keeps
 * that adapter to its end, so a request in flight finishes on the adapter it began with. While a step runs the
 * name is held: requests for it wait, and resolve the route once the hold is released (after the new adapter
 * is loaded). An adapter replaced by a newer one is retired: unloaded once no request is using it.
 */
export class AdapterRoutes {
  private readonly routes = new Map<string, string>();
  private readonly holds = new Map<string, { released: Promise<void>; release: () => void }>();
  private readonly inUse = new Map<string, number>();
  private readonly retiring = new Set<string>();
  private readonly hidden = new Set<string>();

  /** `unload` frees a retired adapter; it is called once its last request has finished. */
  constructor(private readonly unload: (adapter: string) => void) {}

  /** Served names, each with the adapter it points at now. */
  list(): { name: string; adapter: string }[] {
    return [...this.routes].map(([name, adapter]) => ({ name, adapter }));
  }

  /** The adapter a served name points at, or undefined when the name is not a route. */
  target(name: string): string | undefined {
    return this.routes.get(name);
  }

  /** True when `adapter` is the target of some route (listed under the route's name, not its own). */
  isTarget(adapter: string): boolean {
    for (const a of this.routes.values()) if (a === adapter) return true;
    return false;
  }

  /** Keeps an adapter out of the served names (e.g. a trainer's working copy, which changes mid-request). */
  hide(adapter: string): void {
    this.hidden.add(adapter);
  }

  /**
   * True when the adapter is listed under a route's name, is hidden, or is retiring: not served under its own name.
   * A retiring adapter stays loaded for the requests running on it, but its name was unloaded or replaced: a new
   * request for that name gets model_not_found (or the replacement).
   */
  isInternal(adapter: string): boolean {
    return this.hidden.has(adapter) || this.retiring.has(adapter) || this.isTarget(adapter);
  }

  /** Points `name` at `adapter`; the adapter it pointed at before is retired. */
  set(name: string, adapter: string): void {
    const before = this.routes.get(name);
    this.routes.set(name, adapter);
    if (before !== undefined && before !== adapter) this.retire(before);
  }

  /** Removes the route `name`; its adapter is retired. */
  delete(name: string): void {
    const before = this.routes.get(name);
    this.routes.delete(name);
    if (before !== undefined) this.retire(before);
  }

  /**
   * Holds requests for `name` until the returned function is called (idempotent). Holds on one name nest:
   * requests wait until every hold is released.
   */
  hold(name: string): () => void {
    const previous = this.holds.get(name)?.released;
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const released = previous ? Promise.all([previous, mine]).then(() => undefined) : mine;
    const entry = { released, release };
    this.holds.set(name, entry);
    void released.then(() => {
      if (this.holds.get(name) === entry) this.holds.delete(name);
    });
    return () => release();
  }

  /** Resolves once `name` is not held (at once when it is not). */
  async ready(name: string): Promise<void> {
    for (let h = this.holds.get(name); h; h = this.holds.get(name)) await h.released;
  }

  /** Counts a request that uses `adapter` from now until release(adapter). */
  acquire(adapter: string | null): void {
    if (adapter !== null) this.inUse.set(adapter, (this.inUse.get(adapter) ?? 0) + 1);
  }

  release(adapter: string | null): void {
    if (adapter === null) return;
    const n = (this.inUse.get(adapter) ?? 1) - 1;
    if (n > 0) {
      this.inUse.set(adapter, n);
      return;
    }
    this.inUse.delete(adapter);
    if (this.retiring.has(adapter)) this.unloadNow(adapter);
  }

  private retire(adapter: string): void {
    if (this.isTarget(adapter)) return;
    if ((this.inUse.get(adapter) ?? 0) > 0) this.retiring.add(adapter);
    else this.unloadNow(adapter);
  }

  private unloadNow(adapter: string): void {
    this.retiring.delete(adapter);
    this.unload(adapter);
  }
}
