/**
 * Reading and writing the safetensors format (https://huggingface.co/docs/safetensors):
 * an 8-byte little-endian header length N, N bytes of JSON header, then the raw tensor bytes.
 * The native engine has its own C++ reader for model loading; this one serves the TypeScript side
 * (adapters, exports, test fixtures).
 */
import { readFile } from 'node:fs/promises';
import { writeFileAtomic } from '../util/atomic.js';
import { McprlError } from '../util/errors.js';

export type DType = 'F64' | 'F32' | 'F16' | 'BF16' | 'I64' | 'I32' | 'I16' | 'I8' | 'U8' | 'BOOL';

const DTYPE_BYTES: Record<DType, number> = {
  F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1,
};

/** Headers larger than this are refused: a real model's header is a few hundred kilobytes. */
export const MAX_HEADER_BYTES = 100 * 1024 * 1024;

export interface Tensor {
  dtype: DType;
  shape: number[];
  /** Raw little-endian bytes of the tensor. */
  data: Uint8Array;
}

export class SafetensorsError extends McprlError<'SAFETENSORS_INVALID'> {
  constructor(readonly file: string, message: string) {
    super('SAFETENSORS_INVALID', `${file}: ${message}`);
  }
}

/** Parses a safetensors buffer, validating the header, shapes, dtypes and offsets. */
export function parseSafetensors(buf: Uint8Array, file = '<buffer>'): { tensors: Map<string, Tensor>; metadata: Record<string, string> } {
  if (buf.byteLength < 8) throw new SafetensorsError(file, `file is truncated (${buf.byteLength} bytes, the header length needs 8)`);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const headerLen = Number(view.getBigUint64(0, true));
  if (headerLen > MAX_HEADER_BYTES) throw new SafetensorsError(file, `header of ${headerLen} bytes exceeds the ${MAX_HEADER_BYTES}-byte limit`);
  if (8 + headerLen > buf.byteLength) throw new SafetensorsError(file, `file is truncated: header says ${headerLen} bytes but only ${buf.byteLength - 8} follow`);
  let header: Record<string, any>;
  try {
    header = JSON.parse(new TextDecoder().decode(buf.subarray(8, 8 + headerLen)));
  } catch (e) {
    throw new SafetensorsError(file, `header is not valid JSON (${(e as Error).message})`);
  }
  const dataStart = 8 + headerLen;
  const dataLen = buf.byteLength - dataStart;
  const metadata: Record<string, string> = header.__metadata__ ?? {};
  const tensors = new Map<string, Tensor>();
  const spans: [number, number, string][] = [];
  for (const [name, info] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const dtype = info?.dtype as DType;
    if (!(dtype in DTYPE_BYTES)) throw new SafetensorsError(file, `tensor ${name}: unsupported dtype ${JSON.stringify(info?.dtype)}`);
    const shape = info.shape as number[];
    if (!Array.isArray(shape) || shape.some((d) => !Number.isInteger(d) || d < 0)) throw new SafetensorsError(file, `tensor ${name}: invalid shape ${JSON.stringify(shape)}`);
    const [begin, end] = info.data_offsets as [number, number];
    if (!Number.isInteger(begin) || !Number.isInteger(end) || begin > end) throw new SafetensorsError(file, `tensor ${name}: invalid data_offsets ${JSON.stringify(info.data_offsets)}`);
    if (end > dataLen) throw new SafetensorsError(file, `tensor ${name}: data_offsets [${begin}, ${end}] out of range (data section is ${dataLen} bytes; file truncated?)`);
    const expected = shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype];
    if (end - begin !== expected) throw new SafetensorsError(file, `tensor ${name}: ${end - begin} bytes for shape [${shape}] ${dtype} (expected ${expected})`);
    spans.push([begin, end, name]);
    tensors.set(name, { dtype, shape, data: buf.subarray(dataStart + begin, dataStart + end) });
  }
  spans.sort((a, b) => a[0] - b[0]);
  for (let i = 1; i < spans.length; i++) {
    if (spans[i][0] < spans[i - 1][1]) throw new SafetensorsError(file, `tensors ${spans[i - 1][2]} and ${spans[i][2]} overlap`);
  }
  return { tensors, metadata };
}

export async function readSafetensors(file: string) {
  return parseSafetensors(await readFile(file), file);
}

/** Serialises tensors in the given order; the header is padded with spaces to an 8-byte boundary. */
export function serializeSafetensors(tensors: Map<string, Tensor> | Record<string, Tensor>, metadata?: Record<string, string>): Buffer {
  const entries = tensors instanceof Map ? [...tensors.entries()] : Object.entries(tensors);
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  let offset = 0;
  for (const [name, t] of entries) {
    const expected = t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
    if (t.data.byteLength !== expected) throw new SafetensorsError('<write>', `tensor ${name}: ${t.data.byteLength} bytes for shape [${t.shape}] ${t.dtype} (expected ${expected})`);
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + expected] };
    offset += expected;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const headerBytes = Buffer.from(json, 'utf8');
  const out = Buffer.alloc(8 + headerBytes.length + offset);
  out.writeBigUInt64LE(BigInt(headerBytes.length), 0);
  headerBytes.copy(out, 8);
  let pos = 8 + headerBytes.length;
  for (const [, t] of entries) {
    out.set(t.data, pos);
    pos += t.data.byteLength;
  }
  return out;
}

/** Writes atomically (see util/atomic.ts). */
export async function writeSafetensors(file: string, tensors: Map<string, Tensor> | Record<string, Tensor>, metadata?: Record<string, string>): Promise<void> {
  await writeFileAtomic(file, serializeSafetensors(tensors, metadata));
}

/** An F32 tensor from float data (copied). */
export function f32Tensor(shape: number[], values: Float32Array): Tensor {
  return { dtype: 'F32', shape, data: new Uint8Array(values.slice().buffer) };
}

/** A tensor of the given float dtype from f32 values (bf16 by round-to-nearest-even, f16 by IEEE conversion). */
export function floatTensor(dtype: 'F32' | 'F16' | 'BF16', shape: number[], values: Float32Array): Tensor {
  if (dtype === 'F32') return f32Tensor(shape, values);
  const out = new Uint16Array(values.length);
  if (dtype === 'BF16') for (let i = 0; i < values.length; i++) out[i] = f32ToBf16(values[i]);
  else for (let i = 0; i < values.length; i++) out[i] = f32ToF16(values[i]);
  return { dtype, shape, data: new Uint8Array(out.buffer) };
}

/** Widens an F32/F16/BF16 tensor to a Float32Array. */
export function toFloat32(t: Tensor, name = '<tensor>'): Float32Array {
  const n = t.shape.reduce((a, b) => a * b, 1);
  const view = new DataView(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  const out = new Float32Array(n);
  switch (t.dtype) {
    case 'F32':
      for (let i = 0; i < n; i++) out[i] = view.getFloat32(i * 4, true);
      return out;
    case 'BF16':
      for (let i = 0; i < n; i++) out[i] = bf16ToF32(view.getUint16(i * 2, true));
      return out;
    case 'F16':
      for (let i = 0; i < n; i++) out[i] = f16ToF32(view.getUint16(i * 2, true));
      return out;
    default:
      throw new SafetensorsError('<tensor>', `tensor ${name}: dtype ${t.dtype} is not a float type`);
  }
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f32ToBf16(x: number): number {
  f32[0] = x;
  const bits = u32[0];
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x7fffff) !== 0) return 0x7fc0; // NaN
  const rounding = 0x7fff + ((bits >>> 16) & 1);
  return ((bits + rounding) >>> 16) & 0xffff;
}

export function bf16ToF32(h: number): number {
  u32[0] = h << 16;
  return f32[0];
}

export function f32ToF16(x: number): number {
  f32[0] = x;
  const bits = u32[0];
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && (half & 1))) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // Rounding up may carry into the exponent (up to infinity), which is the correct IEEE result.
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1))) half++;
  return sign | half;
}

export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
