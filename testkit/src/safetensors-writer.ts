/**
 * Writes `.safetensors` files: an 8-byte little-endian header length, a JSON header
 * (`{name: {dtype, shape, data_offsets}}` plus `__metadata__`), padded with spaces to a multiple
 * of 8 bytes, then the tensors' bytes back to back in header order.
 */
import { writeFileSync } from 'node:fs'
import { f32ToBf16Bits, f32ToF16Bits } from './float-codec.ts'

/** Storage types the writer supports. */
export type SafetensorsDtype = 'F32' | 'F16' | 'BF16'

/** One tensor to write: values as f32, converted to `dtype` on write. */
export interface TensorToWrite {
  readonly dtype: SafetensorsDtype
  readonly shape: readonly number[]
  readonly data: Float32Array
}

/** HF `torch_dtype` name → safetensors dtype. */
export function safetensorsDtypeOf(torchDtype: 'float32' | 'float16' | 'bfloat16'): SafetensorsDtype {
  switch (torchDtype) {
    case 'float32':
      return 'F32'
    case 'float16':
      return 'F16'
    case 'bfloat16':
      return 'BF16'
  }
  // Reached only past the type checker (a cast, plain JS): any other name once wrote bf16 bytes.
  throw new TypeError(`dtype must be 'float32', 'float16' or 'bfloat16'; received ${JSON.stringify(torchDtype)}`)
}

/** Bytes per element of a safetensors dtype. */
export function dtypeBytes(dtype: SafetensorsDtype): number {
  return dtype === 'F32' ? 4 : 2
}

function encodeTensor(tensor: TensorToWrite): Uint8Array {
  const n = tensor.data.length
  if (tensor.dtype === 'F32') {
    const out = new Uint8Array(n * 4)
    const view = new DataView(out.buffer)
    for (let i = 0; i < n; i++) view.setFloat32(i * 4, tensor.data[i]!, true)
    return out
  }
  const toBits = tensor.dtype === 'F16' ? f32ToF16Bits : f32ToBf16Bits
  const out = new Uint8Array(n * 2)
  const view = new DataView(out.buffer)
  for (let i = 0; i < n; i++) view.setUint16(i * 2, toBits(tensor.data[i]!), true)
  return out
}

/** Serialise tensors (in the given key order) to safetensors bytes. */
export function encodeSafetensors(
  tensors: Readonly<Record<string, TensorToWrite>>,
  metadata: Readonly<Record<string, string>> = { format: 'pt' },
): Buffer {
  const header: Record<string, unknown> = { __metadata__: metadata }
  const parts: Uint8Array[] = []
  let offset = 0
  for (const [name, tensor] of Object.entries(tensors)) {
    const count = tensor.shape.reduce((a, b) => a * b, 1)
    if (count !== tensor.data.length) {
      throw new Error(
        `tensor ${name}: shape [${tensor.shape.join(', ')}] needs ${count} values, got ${tensor.data.length}`,
      )
    }
    const bytes = encodeTensor(tensor)
    header[name] = { dtype: tensor.dtype, shape: [...tensor.shape], data_offsets: [offset, offset + bytes.length] }
    parts.push(bytes)
    offset += bytes.length
  }
  let json = JSON.stringify(header)
  // Pad so the data section starts 8-byte aligned, as the reference implementation does.
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8)
  const headerBytes = Buffer.from(json, 'utf8')
  const prefix = Buffer.alloc(8)
  prefix.writeBigUInt64LE(BigInt(headerBytes.length))
  return Buffer.concat([prefix, headerBytes, ...parts])
}

/** Write tensors to `path` as a safetensors file. Returns the number of data bytes written. */
export function writeSafetensors(
  path: string,
  tensors: Readonly<Record<string, TensorToWrite>>,
  metadata?: Readonly<Record<string, string>>,
): number {
  const bytes = encodeSafetensors(tensors, metadata)
  writeFileSync(path, bytes)
  return Object.values(tensors).reduce((sum, t) => sum + t.data.length * dtypeBytes(t.dtype), 0)
}
