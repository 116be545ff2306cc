/**
 * A reader for the safetensors format (https://github.com/huggingface/safetensors): an 8-byte
 * little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw
 * little-endian tensor bytes. Written here rather than taken from npm: the format is this small,
 * and no maintained npm reader exists (docs/bundle-format.md says so).
 */
import { readFileSync } from "fs";

export type Data = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array | Int8Array | Uint16Array;

export interface Tensor {
  dtype: string;
  shape: number[];
  data: Data;
}

const TYPES: Record<string, { bytes: number; make: (b: ArrayBuffer, o: number, n: number) => Data }> = {
  F32: { bytes: 4, make: (b, o, n) => new Float32Array(b, o, n) },
  F64: { bytes: 8, make: (b, o, n) => new Float64Array(b, o, n) },
  I32: { bytes: 4, make: (b, o, n) => new Int32Array(b, o, n) },
  I64: { bytes: 8, make: (b, o, n) => new BigInt64Array(b, o, n) },
  U8: { bytes: 1, make: (b, o, n) => new Uint8Array(b, o, n) },
  I8: { bytes: 1, make: (b, o, n) => new Int8Array(b, o, n) },
  BOOL: { bytes: 1, make: (b, o, n) => new Uint8Array(b, o, n) },
};

export function readSafetensors(path: string): Map<string, Tensor> {
  const file = readFileSync(path);
  const headerLength = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + headerLength).toString("utf8"));
  const out = new Map<string, Tensor>();
  for (const [name, entry] of Object.entries<any>(header)) {
    if (name === "__metadata__") continue;
    const type = TYPES[entry.dtype];
    if (type === undefined) throw new Error(`${path}: tensor ${name}: dtype ${entry.dtype} is not supported`);
    const [start, end] = entry.data_offsets as [number, number];
    const count = (end - start) / type.bytes;
    // copy into an aligned buffer: typed arrays need offsets that are multiples of their element size
    const buffer = new ArrayBuffer(end - start);
    new Uint8Array(buffer).set(file.subarray(8 + headerLength + start, 8 + headerLength + end));
    out.set(name, { dtype: entry.dtype, shape: entry.shape, data: type.make(buffer, 0, count) });
  }
  return out;
}

/** A 2-D tensor as rows of numbers (a 1-D one as one row). */
export function matrix(t: Tensor): number[][] {
  const [rows, cols] = t.shape.length === 1 ? [1, t.shape[0]] : [t.shape[0], t.shape.slice(1).reduce((a, b) => a * b, 1)];
  const out: number[][] = [];
  for (let i = 0; i < rows; i++) {
    const row = new Array<number>(cols);
    for (let j = 0; j < cols; j++) row[j] = Number(t.data[i * cols + j]);
    out.push(row);
  }
  return out;
}

export function vector(t: Tensor): number[] {
  return Array.from(t.data as ArrayLike<number | bigint>, (v) => Number(v));
}
