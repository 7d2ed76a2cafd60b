/**
 * A checked reader for `.safetensors` files: `u64le headerLength`, a JSON header
 * `{name: {dtype, shape, data_offsets: [begin, end]}, __metadata__?}`, then the data section.
 * Everything the header claims is validated against the file before any tensor is read, so a
 * truncated or hostile file fails with one clear `adapter_invalid` error instead of garbage or a
 * RangeError.
 */
import { LoomError } from '../errors/index.ts'
import { decodeBf16, decodeF16, decodeF32, decodeF64 } from './float-decode.ts'
import { readAdapterFile } from './read-adapter-file.ts'

/** Bytes per element of every dtype the format defines. */
const DTYPE_BYTES: Readonly<Record<string, number>> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U64: 8,
  U32: 4,
  U16: 2,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
}

/** Dtypes `float32()` can decode. */
export const FLOAT_DTYPES = ['F32', 'F16', 'BF16', 'F64'] as const

/** Headers larger than this are refused (real ones are kilobytes; the reference caps at 100 MB). */
const MAX_HEADER_BYTES = 100_000_000

/** One tensor's header entry, with offsets relative to the data section. */
export interface SafetensorsEntry {
  readonly name: string
  readonly dtype: string
  readonly shape: readonly number[]
  readonly begin: number
  readonly end: number
}

/** Who owns the file, for error messages: the adapter id and the file name. */
export interface SafetensorsContext {
  readonly id: string
  readonly file: string
}

function invalid(ctx: SafetensorsContext, detail: string): LoomError {
  return new LoomError('adapter_invalid', { id: ctx.id, detail: `${ctx.file}: ${detail}` })
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0

/** A parsed, validated safetensors file held in memory. */
export class SafetensorsFile {
  readonly metadata: Readonly<Record<string, string>>
  private readonly entries: ReadonlyMap<string, SafetensorsEntry>
  private readonly data: Uint8Array
  private readonly ctx: SafetensorsContext

  private constructor(
    ctx: SafetensorsContext,
    data: Uint8Array,
    entries: Map<string, SafetensorsEntry>,
    metadata: Record<string, string>,
  ) {
    this.ctx = ctx
    this.data = data
    this.entries = entries
    this.metadata = metadata
  }

  /** Read and validate a file. Throws `adapter_invalid` naming `id` when it is not valid safetensors. */
  static async read(path: string, id: string): Promise<SafetensorsFile> {
    const { bytes, file } = await readAdapterFile(path, id)
    return SafetensorsFile.parse(bytes, { id, file })
  }

  /** Validate bytes already in memory. */
  static parse(bytes: Uint8Array, ctx: SafetensorsContext): SafetensorsFile {
    if (bytes.length < 8) throw invalid(ctx, `file is ${bytes.length} bytes, too short for a safetensors header`)
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    const headerLen = view.getBigUint64(0, true)
    if (headerLen > BigInt(Math.min(MAX_HEADER_BYTES, bytes.length - 8))) {
      throw invalid(
        ctx,
        `header length ${headerLen} exceeds the file size (${bytes.length} bytes); truncated or not safetensors`,
      )
    }
    const dataStart = 8 + Number(headerLen)
    let header: unknown
    try {
      header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, dataStart)))
    } catch (err) {
      throw invalid(ctx, `header is not valid JSON (${err instanceof Error ? err.message : String(err)})`)
    }
    if (header === null || typeof header !== 'object' || Array.isArray(header)) {
      throw invalid(ctx, 'header is not a JSON object')
    }
    const dataSize = bytes.length - dataStart
    const entries = new Map<string, SafetensorsEntry>()
    let metadata: Record<string, string> = {}
    for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
      if (name === '__metadata__') {
        if (raw !== null && typeof raw === 'object' && !Array.isArray(raw)) metadata = raw as Record<string, string>
        continue
      }
      const info = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown } | null
      if (info === null || typeof info !== 'object') throw invalid(ctx, `tensor ${name}: entry is not an object`)
      const { dtype, shape, data_offsets: offsets } = info
      if (typeof dtype !== 'string' || DTYPE_BYTES[dtype] === undefined) {
        throw invalid(ctx, `tensor ${name}: unknown dtype ${JSON.stringify(dtype)}`)
      }
      if (!Array.isArray(shape) || !shape.every(isCount)) {
        throw invalid(ctx, `tensor ${name}: shape ${JSON.stringify(shape)} is not a list of non-negative integers`)
      }
      if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isCount)) {
        throw invalid(ctx, `tensor ${name}: data_offsets ${JSON.stringify(offsets)} is not [begin, end]`)
      }
      const [begin, end] = offsets as [number, number]
      if (begin > end || end > dataSize) {
        throw invalid(
          ctx,
          `tensor ${name}: data_offsets [${begin}, ${end}] fall outside the ${dataSize}-byte data section; truncated file?`,
        )
      }
      const expected = (shape as number[]).reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype]!
      if (end - begin !== expected) {
        throw invalid(
          ctx,
          `tensor ${name}: ${dtype} [${shape.join(', ')}] needs ${expected} bytes, data_offsets give ${end - begin}`,
        )
      }
      entries.set(name, { name, dtype, shape: shape as number[], begin, end })
    }
    // Tensors must not share bytes: overlapping ranges mean a corrupt (or crafted) header.
    const sorted = [...entries.values()].filter((e) => e.end > e.begin).sort((a, b) => a.begin - b.begin)
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i]!.begin < sorted[i - 1]!.end) {
        throw invalid(ctx, `tensors ${sorted[i - 1]!.name} and ${sorted[i]!.name} overlap`)
      }
    }
    return new SafetensorsFile(ctx, bytes.subarray(dataStart), entries, metadata)
  }

  /** Tensor names in header order. */
  names(): string[] {
    return [...this.entries.keys()]
  }

  /** A tensor's header entry, or undefined. */
  entry(name: string): SafetensorsEntry | undefined {
    return this.entries.get(name)
  }

  /** A tensor's values as a fresh f32 array (F32, F16, BF16 or F64). */
  float32(name: string): Float32Array {
    const e = this.entries.get(name)
    if (e === undefined) throw invalid(this.ctx, `tensor ${name} is missing`)
    const bytes = this.data.subarray(e.begin, e.end)
    const count = e.shape.reduce((a, b) => a * b, 1)
    switch (e.dtype) {
      case 'F32':
        return decodeF32(bytes, count)
      case 'F16':
        return decodeF16(bytes, count)
      case 'BF16':
        return decodeBf16(bytes, count)
      case 'F64':
        return decodeF64(bytes, count)
      default:
        throw invalid(this.ctx, `tensor ${name} has dtype ${e.dtype}; expected one of ${FLOAT_DTYPES.join(', ')}`)
    }
  }
}
