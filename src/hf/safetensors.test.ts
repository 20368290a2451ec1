import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { f16ToF32, f32ToBf16, f32ToF16, bf16ToF32, floatTensor, parseSafetensors, serializeSafetensors, toFloat32 } from './safetensors.js';

const values = new Float32Array([0, 1, -1, 0.1, -2.5e-3, 3.14159, 65504, 1e-7, -123.456, 6.1e-5, 0.33333334, 1e5]);

function python(code: string): string {
  return execFileSync('/usr/bin/python3', ['-c', code], { encoding: 'utf8' });
}

describe('safetensors', () => {
  it('round-trips F32, F16 and BF16 tensors with metadata', () => {
    const buf = serializeSafetensors({ a: floatTensor('F32', [3, 4], values), b: floatTensor('BF16', [12], values), c: floatTensor('F16', [2, 6], values) }, { format: 'pt' });
    expect((buf.readBigUInt64LE(0) + 8n) % 8n).toBe(0n); // header padded to 8 bytes
    const { tensors, metadata } = parseSafetensors(buf);
    expect(metadata).toEqual({ format: 'pt' });
    expect([...toFloat32(tensors.get('a')!)]).toEqual([...values]);
    expect(tensors.get('b')!.shape).toEqual([12]);
    // bf16 keeps 8 bits of mantissa: relative error below 2^-8.
    toFloat32(tensors.get('b')!).forEach((v, i) => expect(Math.abs(v - values[i])).toBeLessThanOrEqual(Math.abs(values[i]) * 2 ** -8));
  });

  it('matches Python struct (IEEE half) and PyTorch (bfloat16) conversions bit for bit', () => {
    const list = JSON.stringify([...values]);
    const halves = JSON.parse(python(`import struct,json\nprint(json.dumps([struct.unpack('<H', struct.pack('<e', x))[0] if abs(x) < 65520 else None for x in ${list}]))`));
    values.forEach((v, i) => { if (halves[i] !== null) expect(f32ToF16(v)).toBe(halves[i]); });
    values.filter((v) => Math.abs(v) <= 65504).forEach((v) => expect(Math.abs(f16ToF32(f32ToF16(v)) - v)).toBeLessThanOrEqual(Math.max(Math.abs(v) * 2 ** -11, 2 ** -24)));
    expect(f16ToF32(f32ToF16(1e5))).toBe(Infinity);
    let torchOut: number[] | null = null;
    try {
      torchOut = JSON.parse(python(`import torch,json\nt=torch.tensor(${list},dtype=torch.float32).to(torch.bfloat16)\nprint(json.dumps(t.view(torch.int16).tolist()))`));
    } catch {
      console.warn('skipping the PyTorch bf16 comparison: /usr/bin/python3 has no torch');
    }
    if (torchOut) values.forEach((v, i) => expect(f32ToBf16(v)).toBe(torchOut![i] & 0xffff));
    expect(bf16ToF32(f32ToBf16(1))).toBe(1);
  });

  it('names the tensor and the fault for malformed files', () => {
    const good = serializeSafetensors({ w: floatTensor('F32', [2, 2], new Float32Array(4)) });
    expect(() => parseSafetensors(good.subarray(0, 4), 'm.safetensors')).toThrow(/m\.safetensors: file is truncated/);
    expect(() => parseSafetensors(good.subarray(0, good.length - 4), 'm.safetensors')).toThrow(/tensor w: data_offsets .* out of range/);
    const huge = Buffer.from(good);
    huge.writeBigUInt64LE(200n * 1024n * 1024n, 0);
    expect(() => parseSafetensors(huge, 'm.safetensors')).toThrow(/exceeds the 104857600-byte limit/);
    const header = (h: object) => {
      const json = Buffer.from(JSON.stringify(h));
      const b = Buffer.alloc(8 + json.length + 32);
      b.writeBigUInt64LE(BigInt(json.length), 0);
      json.copy(b, 8);
      return b;
    };
    expect(() => parseSafetensors(header({ w: { dtype: 'Q4', shape: [2], data_offsets: [0, 8] } }), 'x')).toThrow(/tensor w: unsupported dtype "Q4"/);
    expect(() => parseSafetensors(header({ w: { dtype: 'F32', shape: [3], data_offsets: [0, 8] } }), 'x')).toThrow(/tensor w: 8 bytes for shape \[3\]/);
    expect(() => parseSafetensors(header({ a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] } }), 'x')).toThrow(/tensors a and b overlap/);
  });
});
