/**
 * A map that keeps the most recently used entries: past `maxEntries`, or past `maxWeight` in all (each entry
 * weighing what `weigh` says), the least recently used go first. For caches of pure computations, whose entries
 * can always be made again.
 */
export class LruCache<K, V> {
  private readonly map = new Map<K, { value: V; weight: number }>();
  private total = 0;

  constructor(private readonly opts: { maxEntries: number; maxWeight?: number; weigh?: (key: K, value: V) => number }) {}

  get(key: K): V | undefined {
    const e = this.map.get(key);
    if (!e) return undefined;
    // A Map iterates in insertion order: re-inserting makes the entry the most recently used.
    this.map.delete(key);
    this.map.set(key, e);
    return e.value;
  }

  set(key: K, value: V): void {
    const old = this.map.get(key);
    if (old) {
      this.map.delete(key);
      this.total -= old.weight;
    }
    const weight = this.opts.weigh ? this.opts.weigh(key, value) : 1;
    // An entry heavier than the whole cache would only evict everything else.
    if (this.opts.maxWeight !== undefined && weight > this.opts.maxWeight) return;
    this.map.set(key, { value, weight });
    this.total += weight;
    for (const [k, e] of this.map) {
      if (this.map.size <= this.opts.maxEntries && (this.opts.maxWeight === undefined || this.total <= this.opts.maxWeight)) break;
      this.map.delete(k);
      this.total -= e.weight;
    }
  }

  get size(): number {
    return this.map.size;
  }
}
