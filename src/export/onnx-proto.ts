/**
 * A minimal protobuf encoder for the parts of ONNX's ModelProto that an exported model uses
 * (https://github.com/onnx/onnx/blob/main/onnx/onnx.proto; field numbers are quoted beside each writer).
 * Messages are encoded as lists of byte chunks, so a tensor's raw data is referenced rather than copied
 * until the final write; a 600 MB embedding table is never concatenated into an intermediate buffer.
 * onnx.proto is proto2: repeated scalars are written unpacked, which every protobuf parser reads.
 */
import { open } from 'node:fs/promises';

const WIRE_VARINT = 0;
const WIRE_FIXED32 = 5;
const WIRE_LEN = 2;

/** Encodes one protobuf message; nested messages are separate writers embedded with `message`. */
export class ProtoWriter {
  private readonly chunks: Uint8Array[] = [];
  private pending: number[] = [];
  private size = 0;

  get length(): number {
    return this.size + this.pending.length;
  }

  private flush(): void {
    if (this.pending.length === 0) return;
    this.chunks.push(Uint8Array.from(this.pending));
    this.size += this.pending.length;
    this.pending = [];
  }

  private rawVarint(v: number | bigint): void {
    if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) {
      while (v >= 0x80) {
        this.pending.push((v % 0x80) | 0x80);
        v = Math.floor(v / 0x80);
      }
      this.pending.push(v);
      return;
    }
    // Negative int64 values are encoded as their 64-bit two's complement (ten bytes), as protobuf requires.
    let b = BigInt.asUintN(64, BigInt(v));
    while (b >= 0x80n) {
      this.pending.push(Number(b & 0x7fn) | 0x80);
      b >>= 7n;
    }
    this.pending.push(Number(b));
  }

  private tag(field: number, wire: number): void {
    this.rawVarint(field * 8 + wire);
  }

  varint(field: number, v: number | bigint): this {
    this.tag(field, WIRE_VARINT);
    this.rawVarint(v);
    return this;
  }

  float(field: number, v: number): this {
    this.tag(field, WIRE_FIXED32);
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, v, true);
    this.pending.push(...b);
    return this;
  }

  string(field: number, s: string): this {
    return this.bytes(field, new TextEncoder().encode(s));
  }

  /** Length-delimited bytes; large payloads are kept by reference. */
  bytes(field: number, data: Uint8Array): this {
    this.tag(field, WIRE_LEN);
    this.rawVarint(data.byteLength);
    if (data.byteLength < 256) {
      for (let i = 0; i < data.byteLength; i++) this.pending.push(data[i]);
    } else {
      this.flush();
      this.chunks.push(data);
      this.size += data.byteLength;
    }
    return this;
  }

  message(field: number, m: ProtoWriter): this {
    this.tag(field, WIRE_LEN);
    this.rawVarint(m.length);
    this.flush();
    for (const c of m.finish()) this.chunks.push(c);
    this.size += m.length;
    return this;
  }

  finish(): Uint8Array[] {
    this.flush();
    return this.chunks;
  }
}

/** ONNX TensorProto.DataType values used here. */
export const DataType = { FLOAT: 1, INT64: 7, BOOL: 9 } as const;
export type DataTypeValue = (typeof DataType)[keyof typeof DataType];

export interface TensorSpec {
  name: string;
  dims: number[];
  dataType: DataTypeValue;
  /** Little-endian raw bytes (TensorProto.raw_data); absent when the data is external. */
  raw?: Uint8Array;
  /** Where the bytes live in an external data file (TensorProto.data_location = EXTERNAL). */
  external?: { location: string; offset: number; length: number };
}

export function tensorProto(t: TensorSpec): ProtoWriter {
  const w = new ProtoWriter();
  for (const d of t.dims) w.varint(1, d); // dims
  w.varint(2, t.dataType); // data_type
  w.string(8, t.name); // name
  if (t.raw) w.bytes(9, t.raw); // raw_data
  if (t.external) {
    for (const [key, value] of [['location', t.external.location], ['offset', String(t.external.offset)], ['length', String(t.external.length)]]) {
      w.message(13, new ProtoWriter().string(1, key).string(2, value)); // external_data: StringStringEntryProto
    }
    w.varint(14, 1); // data_location = EXTERNAL
  }
  return w;
}

export type AttributeValue =
  | { kind: 'int'; value: number }
  | { kind: 'float'; value: number }
  | { kind: 'ints'; value: number[] }
  | { kind: 'string'; value: string }
  | { kind: 'tensor'; value: TensorSpec };

/** AttributeProto.AttributeType values. */
const ATTR_TYPE = { float: 1, int: 2, string: 3, tensor: 4, ints: 7 } as const;

function attributeProto(name: string, a: AttributeValue): ProtoWriter {
  const w = new ProtoWriter().string(1, name); // name
  switch (a.kind) {
    case 'float': w.float(2, a.value); break; // f
    case 'int': w.varint(3, a.value); break; // i
    case 'string': w.string(4, a.value); break; // s
    case 'tensor': w.message(5, tensorProto(a.value)); break; // t
    case 'ints': for (const v of a.value) w.varint(8, v); break; // ints
  }
  w.varint(20, ATTR_TYPE[a.kind]); // type
  return w;
}

export interface NodeSpec {
  opType: string;
  inputs: string[];
  outputs: string[];
  name: string;
  attributes?: Record<string, AttributeValue>;
}

function nodeProto(n: NodeSpec): ProtoWriter {
  const w = new ProtoWriter();
  for (const i of n.inputs) w.string(1, i); // input
  for (const o of n.outputs) w.string(2, o); // output
  w.string(3, n.name); // name
  w.string(4, n.opType); // op_type
  for (const [k, v] of Object.entries(n.attributes ?? {})) w.message(5, attributeProto(k, v)); // attribute
  return w;
}

export interface ValueInfoSpec {
  name: string;
  elemType: DataTypeValue;
  /** A number is a fixed size, a string a named dynamic dimension (dim_param). */
  dims: (number | string)[];
}

function valueInfoProto(v: ValueInfoSpec): ProtoWriter {
  const shape = new ProtoWriter();
  for (const d of v.dims) {
    const dim = new ProtoWriter();
    if (typeof d === 'number') dim.varint(1, d); // dim_value
    else dim.string(2, d); // dim_param
    shape.message(1, dim); // TensorShapeProto.dim
  }
  const tensorType = new ProtoWriter().varint(1, v.elemType).message(2, shape); // TypeProto.Tensor: elem_type, shape
  const type = new ProtoWriter().message(1, tensorType); // TypeProto.tensor_type
  return new ProtoWriter().string(1, v.name).message(2, type); // ValueInfoProto: name, type
}

export interface ModelSpecProto {
  irVersion: number;
  opsetVersion: number;
  producerName: string;
  producerVersion: string;
  graphName: string;
  docString?: string;
  nodes: NodeSpec[];
  initializers: TensorSpec[];
  inputs: ValueInfoSpec[];
  outputs: ValueInfoSpec[];
  metadata?: Record<string, string>;
}

/** Encodes a whole ModelProto as byte chunks. */
export function modelProto(m: ModelSpecProto): Uint8Array[] {
  const graph = new ProtoWriter();
  for (const n of m.nodes) graph.message(1, nodeProto(n)); // node
  graph.string(2, m.graphName); // name
  for (const t of m.initializers) graph.message(5, tensorProto(t)); // initializer
  if (m.docString) graph.string(10, m.docString); // doc_string
  for (const i of m.inputs) graph.message(11, valueInfoProto(i)); // input
  for (const o of m.outputs) graph.message(12, valueInfoProto(o)); // output

  const model = new ProtoWriter();
  model.varint(1, m.irVersion); // ir_version
  model.string(2, m.producerName); // producer_name
  model.string(3, m.producerVersion); // producer_version
  model.message(7, graph); // graph
  model.message(8, new ProtoWriter().string(1, '').varint(2, m.opsetVersion)); // opset_import (default domain)
  for (const [k, v] of Object.entries(m.metadata ?? {})) model.message(14, new ProtoWriter().string(1, k).string(2, v)); // metadata_props
  return model.finish();
}

/** Writes byte chunks to a file without concatenating them first. */
export async function writeChunks(file: string, chunks: Uint8Array[]): Promise<number> {
  const fh = await open(file, 'w');
  let total = 0;
  try {
    for (const c of chunks) {
      let off = 0;
      while (off < c.byteLength) {
        const { bytesWritten } = await fh.write(c, off, c.byteLength - off);
        off += bytesWritten;
      }
      total += c.byteLength;
    }
  } finally {
    await fh.close();
  }
  return total;
}
