/**
 * Seeded randomness, reproducible by `--seed`: scenario generation and splits, the curriculum's order, LoRA
 * initialisation and the random test models all draw from mulberry32. Tiny, fast and good enough for choosing
 * among candidates and initialising weights; not for cryptography.
 */

/** mulberry32. Its whole state is one 32-bit word, so it can be saved with a checkpoint and restored. */
export class Mulberry32 {
  state: number;
  constructor(state: number) {
    this.state = state >>> 0;
  }

  /** Uniform in [0, 1). */
  uniform(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Standard normal (Box–Muller; draws two uniforms). */
  normal(): number {
    const u = Math.max(this.uniform(), 1e-12);
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.uniform());
  }
}

/** The choices scenario generation makes. */
export interface Rng {
  /** Uniform in [0, 1). */
  next(): number;
  /** Uniform integer in [lo, hi] (inclusive). */
  int(lo: number, hi: number): number;
  pick<T>(xs: readonly T[]): T;
  /** A shuffled copy (Fisher–Yates). */
  shuffle<T>(xs: readonly T[]): T[];
  /** True with probability p. */
  chance(p: number): boolean;
}

/** An Rng seeded from any number (its integer part, mixed with the golden ratio so that small seeds differ well). */
export function createRng(seed: number): Rng {
  const m = new Mulberry32((Math.floor(seed) ^ 0x9e3779b9) >>> 0);
  const next = (): number => m.uniform();
  const int = (lo: number, hi: number): number => lo + Math.floor(next() * (hi - lo + 1));
  return {
    next,
    int,
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)],
    shuffle: <T>(xs: readonly T[]): T[] => {
      const out = [...xs];
      for (let i = out.length - 1; i > 0; i--) {
        const j = Math.floor(next() * (i + 1));
        [out[i], out[j]] = [out[j], out[i]];
      }
      return out;
    },
    chance: (p: number): boolean => next() < p,
  };
}

/** FNV-1a 32-bit hash of a string: a stable bucket key that does not depend on any seed. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}
