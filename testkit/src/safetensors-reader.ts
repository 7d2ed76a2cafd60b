/**
 * A minimal safetensors reader for the test kit's own use (the reference model, merges, tests).
 * It is independent of the core's reader on purpose, so the two can check each other.
 */
import { readFileSync } from 'node:fs'
import { bf16BitsToF32, f16BitsToF32 } from './float-codec.ts'
import type { SafetensorsDtype } from './safetensors-writer.ts'

/** One tensor decoded to float64. */
export interface ReadTensor {
  readonly dtype: SafetensorsDtype
  readonly shape: readonly number[]
  readonly data: Float64Array
}

/** Read every tensor of a safetensors file, decoded to float64, plus its `__metadata__`. */
export function readSafetensors(path: string): {
  tensors: Map<string, ReadTensor>
  metadata: Record<string, string>
} {
  const buf = readFileSync(path)
  const headerLen = Number(buf.readBigUInt64LE(0))
  const header = JSON.parse(buf.subarray(8, 8 + headerLen).toString('utf8')) as Record<string, unknown>
  const base = 8 + headerLen
  const tensors = new Map<string, ReadTensor>()
  let metadata: Record<string, string> = {}
  for (const [name, raw] of Object.entries(header)) {
    if (name === '__metadata__') {
      metadata = raw as Record<string, string>
      continue
    }
    const info = raw as { dtype: string; shape: number[]; data_offsets: [number, number] }
    const [start, end] = info.data_offsets
    const view = new DataView(buf.buffer, buf.byteOffset + base + start, end - start)
    const count = info.shape.reduce((a, b) => a * b, 1)
    const data = new Float64Array(count)
    if (info.dtype === 'F32') {
      for (let i = 0; i < count; i++) data[i] = view.getFloat32(i * 4, true)
    } else if (info.dtype === 'F16') {
      for (let i = 0; i < count; i++) data[i] = f16BitsToF32(view.getUint16(i * 2, true))
    } else if (info.dtype === 'BF16') {
      for (let i = 0; i < count; i++) data[i] = bf16BitsToF32(view.getUint16(i * 2, true))
    } else {
      throw new Error(`${path}: tensor ${name} has unsupported dtype ${info.dtype}`)
    }
    tensors.set(name, { dtype: info.dtype, shape: info.shape, data })
  }
  return { tensors, metadata }
}
