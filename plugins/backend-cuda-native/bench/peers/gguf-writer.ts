/**
 * A GGUF (version 3) writer: the file format llama.cpp loads. Written from the format's spec
 * (ggml `docs/gguf.md`): little-endian throughout; a header (`GGUF`, version, tensor count and
 * metadata count as u64), the metadata key/value pairs, one info per tensor (name, dimensions
 * innermost first, ggml type, offset into the data section), zero padding to the alignment, then
 * each tensor's bytes at its offset, every offset a multiple of the alignment.
 *
 * Tensors are produced one at a time (`data()` is called when the tensor is written), so a model
 * of hundreds of MB is never held in memory whole. The file appears under its name only once
 * complete (written beside it, then renamed).
 */
import { closeSync, openSync, renameSync, rmSync, writeSync } from 'node:fs'

/** The ggml tensor types this writer emits, with their ids in `enum ggml_type`. */
export const GGML_TYPES = { F32: 0, F16: 1, Q8_0: 8, BF16: 30 } as const
export type GgmlTypeName = keyof typeof GGML_TYPES

/** Elements per block and bytes per block of each type (Q8_0: an f16 scale + 32 int8 values). */
const BLOCKS: Readonly<Record<GgmlTypeName, { readonly elements: number; readonly bytes: number }>> = {
  F32: { elements: 1, bytes: 4 },
  F16: { elements: 1, bytes: 2 },
  BF16: { elements: 1, bytes: 2 },
  Q8_0: { elements: 32, bytes: 34 },
}

/** Bytes of a tensor of `type` with `shape` (outermost first; blocks run along the last axis). */
export function ggmlTensorBytes(type: GgmlTypeName, shape: readonly number[]): number {
  const block = BLOCKS[type]
  const rowLength = shape[shape.length - 1] ?? 1
  if (rowLength % block.elements !== 0)
    throw new Error(`${type} needs rows that are a multiple of ${block.elements}; shape [${shape.join(', ')}]`)
  const elements = shape.reduce((a, b) => a * b, 1)
  return (elements / block.elements) * block.bytes
}

/** Metadata value types (`enum gguf_metadata_value_type`). */
const VALUE_TYPES = {
  uint8: 0,
  int8: 1,
  uint16: 2,
  int16: 3,
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
  uint64: 10,
  int64: 11,
  float64: 12,
} as const

/** One metadata value; arrays hold scalars or strings of one type. */
export type GgufValue =
  | { readonly type: 'uint32' | 'int32' | 'float32'; readonly value: number }
  | { readonly type: 'uint64'; readonly value: bigint }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'array'; readonly itemType: 'string'; readonly value: readonly string[] }
  | { readonly type: 'array'; readonly itemType: 'int32' | 'uint32' | 'float32'; readonly value: ArrayLike<number> }

/** One tensor to write. */
export interface GgufTensor {
  /** llama.cpp's name, e.g. `blk.0.attn_q.weight`. */
  readonly name: string
  /** PyTorch order, outermost first (`[out, in]` for a weight); the file stores it reversed. */
  readonly shape: readonly number[]
  readonly type: GgmlTypeName
  /** The tensor's bytes in ggml layout, exactly `ggmlTensorBytes(type, shape)` of them. */
  readonly data: () => Uint8Array
}

/** Where things landed in a written file (for tests and logs). */
export interface GgufLayout {
  readonly bytes: number
  /** Absolute offset of the data section. */
  readonly dataOffset: number
  /** Per tensor, its offset relative to the data section. */
  readonly tensorOffsets: readonly number[]
}

/** A growable little-endian byte buffer for the header part of the file. */
class ByteSink {
  private buf = Buffer.alloc(1 << 16)
  length = 0

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return
    const next = Buffer.alloc(Math.max(this.buf.length * 2, this.length + n))
    this.buf.copy(next, 0, 0, this.length)
    this.buf = next
  }
  u8(v: number): void {
    this.reserve(1)
    this.buf.writeUInt8(v, this.length)
    this.length += 1
  }
  u32(v: number): void {
    this.reserve(4)
    this.buf.writeUInt32LE(v, this.length)
    this.length += 4
  }
  i32(v: number): void {
    this.reserve(4)
    this.buf.writeInt32LE(v, this.length)
    this.length += 4
  }
  f32(v: number): void {
    this.reserve(4)
    this.buf.writeFloatLE(v, this.length)
    this.length += 4
  }
  u64(v: number | bigint): void {
    this.reserve(8)
    this.buf.writeBigUInt64LE(BigInt(v), this.length)
    this.length += 8
  }
  /** A gguf string: u64 byte length, then UTF-8 bytes without a terminator. */
  str(s: string): void {
    const bytes = Buffer.from(s, 'utf8')
    this.u64(bytes.length)
    this.reserve(bytes.length)
    bytes.copy(this.buf, this.length)
    this.length += bytes.length
  }
  zeros(n: number): void {
    this.reserve(n)
    this.buf.fill(0, this.length, this.length + n)
    this.length += n
  }
  bytes(): Buffer {
    return this.buf.subarray(0, this.length)
  }
}

function writeScalar(sink: ByteSink, type: 'int32' | 'uint32' | 'float32', v: number): void {
  if (type === 'int32') sink.i32(v)
  else if (type === 'uint32') sink.u32(v)
  else sink.f32(v)
}

function writeValue(sink: ByteSink, key: string, v: GgufValue): void {
  sink.u32(VALUE_TYPES[v.type])
  switch (v.type) {
    case 'uint32':
    case 'int32':
    case 'float32':
      writeScalar(sink, v.type, v.value)
      return
    case 'uint64':
      sink.u64(v.value)
      return
    case 'bool':
      sink.u8(v.value ? 1 : 0)
      return
    case 'string':
      sink.str(v.value)
      return
    case 'array': {
      sink.u32(VALUE_TYPES[v.itemType])
      sink.u64(v.value.length)
      if (v.itemType === 'string') for (const s of v.value) sink.str(s)
      else for (let i = 0; i < v.value.length; i++) writeScalar(sink, v.itemType, v.value[i]!)
      return
    }
    default:
      throw new Error(`metadata ${key}: unknown value type`)
  }
}

const pad = (n: number, alignment: number): number => (alignment - (n % alignment)) % alignment

/**
 * Write a GGUF v3 file. `metadata` keeps its order; a `general.alignment` entry, when present,
 * must equal `alignment` (llama.cpp reads the alignment from it; 32 when absent).
 */
export function writeGguf(
  file: string,
  metadata: ReadonlyArray<readonly [string, GgufValue]>,
  tensors: readonly GgufTensor[],
  alignment = 32,
): GgufLayout {
  const declared = metadata.find(([k]) => k === 'general.alignment')?.[1]
  if (declared && (declared.type !== 'uint32' || declared.value !== alignment))
    throw new Error(`general.alignment must be uint32 ${alignment}`)
  const sink = new ByteSink()
  sink.u32(0x46554747) // 'GGUF' read as a little-endian u32
  sink.u32(3)
  sink.u64(tensors.length)
  sink.u64(metadata.length)
  for (const [key, value] of metadata) {
    sink.str(key)
    writeValue(sink, key, value)
  }
  const tensorOffsets: number[] = []
  let offset = 0
  for (const t of tensors) {
    sink.str(t.name)
    sink.u32(t.shape.length)
    for (let d = t.shape.length - 1; d >= 0; d--) sink.u64(t.shape[d]!) // ggml order: ne[0] innermost
    sink.u32(GGML_TYPES[t.type])
    sink.u64(offset)
    tensorOffsets.push(offset)
    const n = ggmlTensorBytes(t.type, t.shape)
    offset += n + pad(n, alignment)
  }
  sink.zeros(pad(sink.length, alignment))
  const dataOffset = sink.length

  const partial = `${file}.partial`
  const fd = openSync(partial, 'w')
  try {
    writeSync(fd, sink.bytes())
    const zeros = Buffer.alloc(alignment)
    for (const t of tensors) {
      const data = t.data()
      const expected = ggmlTensorBytes(t.type, t.shape)
      if (data.byteLength !== expected)
        throw new Error(`tensor ${t.name}: ${data.byteLength} bytes, expected ${expected}`)
      writeSync(fd, data)
      writeSync(fd, zeros, 0, pad(expected, alignment))
    }
  } catch (err) {
    closeSync(fd)
    rmSync(partial, { force: true })
    throw err
  }
  closeSync(fd)
  renameSync(partial, file)
  return { bytes: dataOffset + offset, dataOffset, tensorOffsets }
}
