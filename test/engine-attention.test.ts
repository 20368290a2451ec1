/**
 * The attention op alone (native/ops/attention.cc): the engine's flash-style tiles against the one-row-at-a-time
 * reference computed in double precision, and batch invariance, bit for bit.
 *
 * Tolerance against the reference: |tiles - reference| <= 1e-5 * max(1, max |reference|) per tensor (out, lse,
 * dq, dk, dv). The tiles sum in f32 (observed ~1e-6 forward, ~1e-5 for dk/dv, which sum over every query
 * of a long sequence); a wrong mask, block boundary or GQA head mapping is off by far more (~1e-1).
 *
 * Batch invariance (what decoding, a prompt prefilled in pieces, and a prefix KV cache rely on): a row's out
 * and lse are the same bits whatever other rows share the call, however its own sequence's rows are split over
 * calls with npast, and with 1 or 2 threads.
 */
import { describe, expect, it } from 'vitest';
import { makeRng } from '../scripts/random-model.js';
import { loadNativeTesting } from '../src/engine/native-testing.js';

const addon = loadNativeTesting();
const TOL = 1e-5;

function randn(seed: number, n: number): Float32Array {
  const rng = makeRng(seed);
  return Float32Array.from({ length: n }, () => rng.normal());
}

function maxAbs(a: Float32Array): number {
  let m = 0;
  for (const x of a) m = Math.max(m, Math.abs(x));
  return m;
}

function expectClose(got: Float32Array, want: Float32Array, what: string): void {
  expect(got.length, what).toBe(want.length);
  let err = 0;
  for (let i = 0; i < got.length; i++) err = Math.max(err, Math.abs(got[i] - want[i]));
  expect(err, what).toBeLessThanOrEqual(TOL * Math.max(1, maxAbs(want)));
}

/** Byte equality: toEqual on typed arrays would treat -0 and 0 as equal. */
function expectBits(got: Float32Array, want: Float32Array, what: string): void {
  expect(Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(Buffer.from(want.buffer, want.byteOffset, want.byteLength)), what).toBe(true);
}

describe('attention tiles vs the double-precision reference', () => {
  // Packed sequences of 150 rows (three key blocks of 64, the last cut), 1 row and 97 rows.
  const lens = [150, 1, 97];
  const cu = Int32Array.from([0, ...lens.map((_, i) => lens.slice(0, i + 1).reduce((a, b) => a + b, 0))]);
  const T = cu[cu.length - 1];
  const segments = Int32Array.from(lens.flatMap((n, s) => [cu[s], n, 0, cu[s]]));
  it.each([
    [1, 8], [2, 64], [4, 128], [1, 64], [2, 8], [4, 32], [2, 20],
  ])('GQA ratio %i, head_dim %i: forward and backward', (group, D) => {
    const Hkv = 2, H = Hkv * group;
    const q = randn(1, T * H * D), k = randn(2, T * Hkv * D), v = randn(3, T * Hkv * D), g = randn(4, T * H * D);
    const tiles = addon.attention(q, k, v, H, Hkv, D, segments, 'tiles');
    const ref = addon.attention(q, k, v, H, Hkv, D, segments, 'reference');
    expectClose(tiles.out, ref.out, 'out');
    expectClose(tiles.lse, ref.lse, 'lse');
    const bt = addon.attentionBackward(g, q, k, v, tiles.out, tiles.lse, cu, H, Hkv, D, 'tiles');
    const br = addon.attentionBackward(g, q, k, v, ref.out, ref.lse, cu, H, Hkv, D, 'reference');
    expectClose(bt.dq, br.dq, 'dq');
    expectClose(bt.dk, br.dk, 'dk');
    expectClose(bt.dv, br.dv, 'dv');
  });
});

describe('attention is batch-invariant, bit for bit', () => {
  const Hkv = 2, group = 2, H = Hkv * group, D = 64, N = 300;
  const q = randn(11, N * H * D), k = randn(12, N * Hkv * D), v = randn(13, N * Hkv * D);
  const rowsOf = (x: Float32Array, r0: number, r1: number, width: number) => x.subarray(r0 * width, r1 * width);
  const whole = addon.attention(q, k, v, H, Hkv, D, Int32Array.from([0, N, 0, 0]), 'tiles');

  it.each([1, 37, 63, 64, 65, 128, 200, 299])('a prefill of %i rows, then the rest with npast, equals one prefill', (split) => {
    // Both calls read the one cache (rows 0 .. N of k/v); the second's queries sit at positions split ..
    const first = addon.attention(q, k, v, H, Hkv, D, Int32Array.from([0, split, 0, 0]), 'tiles');
    const rest = addon.attention(q, k, v, H, Hkv, D, Int32Array.from([split, N - split, split, 0]), 'tiles');
    expectBits(rowsOf(first.out, 0, split, H * D), rowsOf(whole.out, 0, split, H * D), 'out, first part');
    expectBits(rowsOf(rest.out, split, N, H * D), rowsOf(whole.out, split, N, H * D), 'out, the rest');
    expectBits(rowsOf(first.lse, 0, split, H), rowsOf(whole.lse, 0, split, H), 'lse, first part');
    expectBits(rowsOf(rest.lse, split, N, H), rowsOf(whole.lse, split, N, H), 'lse, the rest');
  });

  it('decoding every row as its own segment, all in one call, equals one prefill', () => {
    const segs = Int32Array.from(Array.from({ length: N }, (_, i) => [i, 1, i, 0]).flat());
    const decode = addon.attention(q, k, v, H, Hkv, D, segs, 'tiles');
    expectBits(decode.out, whole.out, 'out');
    expectBits(decode.lse, whole.lse, 'lse');
  });

  it('a segment gives the same bits alone and beside other sequences, with 1 or 2 threads', () => {
    // Two sequences over one key buffer: rows 0..120 (keys 0..120) and rows 120..300 (keys 120..300, its own).
    const segs = Int32Array.from([0, 120, 0, 0, 120, 180, 0, 120]);
    const both = addon.attention(q, k, v, H, Hkv, D, segs, 'tiles', 2);
    const one = addon.attention(q, k, v, H, Hkv, D, Int32Array.from([120, 180, 0, 120]), 'tiles', 1);
    expectBits(rowsOf(both.out, 120, N, H * D), rowsOf(one.out, 120, N, H * D), 'out of the second sequence');
    expectBits(rowsOf(both.out, 0, 120, H * D), rowsOf(whole.out, 0, 120, H * D), 'out of the first sequence');
    expectBits(rowsOf(both.lse, 120, N, H), rowsOf(one.lse, 120, N, H), 'lse of the second sequence');
  });

  it('refuses segments outside q or k, naming the segment', () => {
    expect(() => addon.attention(q, k, v, H, Hkv, D, Int32Array.from([0, N, 1, 0]), 'tiles')).toThrow(/segment 0 is out of range/);
    expect(() => addon.attention(q, k, v, H, Hkv, D, Int32Array.from([0, 1, 0, 0]), 'other' as 'tiles')).toThrow(/kernel must be/);
  });
});
