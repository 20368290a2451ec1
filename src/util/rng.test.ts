/**
 * The seeded generators draw exactly what the copies they replaced drew (values recorded from those copies),
 * so scenario sets, curricula, LoRA initialisations and the bundled tiny model rebuild bit for bit.
 */
import { describe, expect, it } from 'vitest';
import { createRng, hashString, Mulberry32 } from './rng.js';

describe('rng', () => {
  it('createRng(seed) reproduces the scenario generator', () => {
    const r = createRng(42);
    expect([r.next(), r.int(1, 6), r.next()]).toEqual([0.4813160905614495, 6, 0.7379171899519861]);
  });

  it('Mulberry32(state) reproduces the trainer and random-model generator, normals included', () => {
    const m = new Mulberry32(7);
    expect([m.uniform(), m.normal(), m.uniform()]).toEqual([0.011704753153026104, 2.33373171783212, 0.6990287057124078]);
    // The state is one word: a generator restored from it continues the same sequence.
    const copy = new Mulberry32(m.state);
    expect(copy.uniform()).toBe(m.uniform());
  });

  it('hashString is FNV-1a', () => {
    expect(hashString('')).toBe(0x811c9dc5);
    expect(hashString('a')).toBe(0xe40c292c);
  });
});
