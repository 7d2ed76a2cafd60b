/**
 * Reads `adapter_model.bin` as `torch.save` (torch >= 1.6) writes it: a zip archive
 * `<prefix>/data.pkl` + `<prefix>/data/<key>` (+ `version`, `byteorder`), where the pickle is a
 * dict of name → tensor. The pickle is interpreted by the restricted unpickler under the torch
 * allow-list, so nothing in the file can run. Tensors are strided views of storages; `float32()`
 * materialises one contiguously. Every failure is an `adapter_invalid` naming the adapter.
 */
import { LoomError } from '../../errors/index.ts'
import { decodeBf16, decodeF16, decodeF32, decodeF64 } from '../float-decode.ts'
import { describePickleValue, PickleDict } from './pickle-values.ts'
import { restrictedUnpickle } from './restricted-unpickler.ts'
import { isTorchTensor, TORCH_DTYPE_BYTES, torchStateDictPolicy, type TorchTensor } from './torch-allow-list.ts'
import { TorchBinError } from './torch-bin-error.ts'
import { ZipArchive } from './zip-reader.ts'
import { readAdapterFile } from '../read-adapter-file.ts'

/** Who owns the file, for error messages: the adapter id and the file name. */
export interface TorchBinContext {
  readonly id: string
  readonly file: string
}

/** Larger pickles are refused: a state dict's pickle is kilobytes (the tensors live beside it). */
const MAX_PICKLE_BYTES = 64 * 1024 * 1024

function toLoomError(ctx: TorchBinContext, err: unknown): unknown {
  if (!(err instanceof TorchBinError)) return err
  const detail = err.refused ? `${ctx.file} is not a plain state dict: ${err.message}` : `${ctx.file}: ${err.message}`
  return new LoomError('adapter_invalid', { id: ctx.id, detail }, { cause: err })
}

/** A parsed `torch.save` state dict of tensors, held in memory. */
export class TorchStateDict {
  private readonly tensors: ReadonlyMap<string, TorchTensor>
  private readonly ctx: TorchBinContext

  private constructor(ctx: TorchBinContext, tensors: Map<string, TorchTensor>) {
    this.ctx = ctx
    this.tensors = tensors
  }

  /** Read and check a file. Throws `adapter_invalid` naming `id` when it is not a plain state dict. */
  static async read(path: string, id: string): Promise<TorchStateDict> {
    const { bytes, file } = await readAdapterFile(path, id)
    return TorchStateDict.parse(bytes, { id, file })
  }

  /** Check bytes already in memory. */
  static parse(bytes: Uint8Array, ctx: TorchBinContext): TorchStateDict {
    try {
      return new TorchStateDict(ctx, parseArchive(bytes))
    } catch (err) {
      throw toLoomError(ctx, err)
    }
  }

  /** Tensor names in the dict's order. */
  names(): string[] {
    return [...this.tensors.keys()]
  }

  /** A tensor's shape, or undefined when there is no such tensor. */
  shape(name: string): readonly number[] | undefined {
    return this.tensors.get(name)?.size
  }

  /** A tensor's dtype (`float32`, `float16`, …), or undefined. */
  dtype(name: string): string | undefined {
    return this.tensors.get(name)?.storage.dtype
  }

  /** A tensor's values, contiguous in row-major order, as a fresh f32 array (f32, f16, bf16 or f64). */
  float32(name: string): Float32Array {
    const t = this.tensors.get(name)
    if (t === undefined) throw toLoomError(this.ctx, new TorchBinError(`tensor ${name} is missing`))
    const count = t.size.reduce((a, b) => a * b, 1)
    const bytes = contiguousBytes(t, count)
    switch (t.storage.dtype) {
      case 'float32':
        return decodeF32(bytes, count)
      case 'float16':
        return decodeF16(bytes, count)
      case 'bfloat16':
        return decodeBf16(bytes, count)
      case 'float64':
        return decodeF64(bytes, count)
      default:
        throw toLoomError(
          this.ctx,
          new TorchBinError(
            `tensor ${name} has dtype ${t.storage.dtype}; expected float32, float16, bfloat16 or float64`,
          ),
        )
    }
  }
}

// The first bytes of the pre-1.6 format: PROTO 2, then LONG1 of torch's magic number 0x1950a86a20f9469cfc6c.
const LEGACY_MAGIC = [0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19]

function parseArchive(bytes: Uint8Array): Map<string, TorchTensor> {
  if (LEGACY_MAGIC.every((b, i) => bytes[i] === b)) {
    throw new TorchBinError(
      'written in the legacy (torch < 1.6) format, which is not supported; re-save it with a current torch or convert it to safetensors',
    )
  }
  const zip = ZipArchive.parse(bytes)
  // The top folder is named after the file torch.save wrote to (`archive`, `adapter_model`, …).
  const pickles = zip.names().filter((n) => /^[^/]+\/data\.pkl$/.test(n))
  if (pickles.length !== 1) {
    throw new TorchBinError(
      pickles.length === 0
        ? 'the zip archive has no <folder>/data.pkl, so it was not written by torch.save'
        : `the zip archive has ${pickles.length} data.pkl entries`,
    )
  }
  const prefix = pickles[0]!.slice(0, -'data.pkl'.length)
  const byteorder = `${prefix}byteorder`
  if (zip.has(byteorder)) {
    const order = new TextDecoder().decode(zip.read(byteorder)).trim()
    if (order !== 'little')
      throw new TorchBinError(`byteorder is ${JSON.stringify(order)}; only little-endian archives are supported`)
  }
  if ((zip.sizeOf(pickles[0]!) ?? 0) > MAX_PICKLE_BYTES) {
    throw new TorchBinError(`data.pkl is larger than ${MAX_PICKLE_BYTES} bytes; a state dict's pickle is far smaller`)
  }
  const policy = torchStateDictPolicy((key) => {
    const entry = `${prefix}data/${key}`
    if (!zip.has(entry)) throw new TorchBinError(`data.pkl refers to storage ${key}, but the archive has no ${entry}`)
    return zip.read(entry)
  })
  const root = restrictedUnpickle(zip.read(pickles[0]!), policy)
  if (!(root instanceof PickleDict)) {
    throw new TorchBinError(`data.pkl holds ${describePickleValue(root)}, not a dict of tensors`, { refused: true })
  }
  const tensors = new Map<string, TorchTensor>()
  for (const [name, value] of root.map) {
    if (typeof name !== 'string')
      throw new TorchBinError(`a key is ${describePickleValue(name)}, not a string`, { refused: true })
    if (!isTorchTensor(value)) {
      throw new TorchBinError(`${name} is ${describePickleValue(value)}, not a tensor`, { refused: true })
    }
    tensors.set(name, value)
  }
  return tensors
}

/**
 * The tensor's elements in row-major order as contiguous bytes: a view of the storage when the
 * tensor is already contiguous, else a gathered copy (slices, transposes, offsets).
 */
function contiguousBytes(t: TorchTensor, count: number): Uint8Array {
  const width = TORCH_DTYPE_BYTES[t.storage.dtype]
  const src = t.storage.bytes
  const dims = t.size.length
  let contiguous = true
  for (let d = dims - 1, expect = 1; d >= 0; d--) {
    if (t.size[d]! !== 1 && t.stride[d]! !== expect) contiguous = false
    expect *= t.size[d]!
  }
  if (contiguous || count === 0) return src.subarray(t.offset * width, (t.offset + count) * width)
  const out = new Uint8Array(count * width)
  const index = new Array<number>(dims).fill(0)
  let element = t.offset
  for (let i = 0; i < count; i++) {
    out.set(src.subarray(element * width, (element + 1) * width), i * width)
    // Odometer over the dimensions, innermost fastest, tracking the storage position as it goes.
    for (let d = dims - 1; d >= 0; d--) {
      index[d]!++
      element += t.stride[d]!
      if (index[d]! < t.size[d]!) break
      element -= t.size[d]! * t.stride[d]!
      index[d] = 0
    }
  }
  return out
}
