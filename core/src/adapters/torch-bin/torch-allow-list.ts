/**
 * The unpickle policy for `torch.save` state dicts: exactly the globals a plain state dict of
 * tensors needs, and storages loaded by persistent id from the archive. Nothing here runs code;
 * `_rebuild_tensor_v2` just records where a tensor's elements are.
 *
 * Allowed globals:
 * - `collections.OrderedDict`: an empty (or list-of-pairs) dict; BUILD may give it attributes
 *   (`_metadata`), which are ignored.
 * - `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])`
 * - `torch._utils._rebuild_parameter(tensor, requires_grad, hooks)`: the tensor itself.
 * - `torch.{Float,Half,BFloat16,Double,Long,Int,Short,Char,Byte,Bool}Storage`: storage types in
 *   persistent ids only; calling one is refused (only float ones can become weights).
 * Everything else, `torch.storage._load_from_bytes` included (it runs `torch.load` on nested
 * bytes), is refused by name.
 */
import { describePickleValue, PickleDict, PickleTuple, type PickleGlobal, type PickleValue } from './pickle-values.ts'
import type { UnpicklePolicy } from './restricted-unpickler.ts'
import { TorchBinError } from './torch-bin-error.ts'

/** Element types of the storages a state dict may hold. */
export type TorchDtype =
  'float32' | 'float16' | 'bfloat16' | 'float64' | 'int64' | 'int32' | 'int16' | 'int8' | 'uint8' | 'bool'

/** Bytes per element. */
export const TORCH_DTYPE_BYTES: Readonly<Record<TorchDtype, number>> = {
  float32: 4,
  float16: 2,
  bfloat16: 2,
  float64: 8,
  int64: 8,
  int32: 4,
  int16: 2,
  int8: 1,
  uint8: 1,
  bool: 1,
}

const STORAGE_TYPES: Readonly<Record<string, TorchDtype>> = {
  FloatStorage: 'float32',
  HalfStorage: 'float16',
  BFloat16Storage: 'bfloat16',
  DoubleStorage: 'float64',
  LongStorage: 'int64',
  IntStorage: 'int32',
  ShortStorage: 'int16',
  CharStorage: 'int8',
  ByteStorage: 'uint8',
  BoolStorage: 'bool',
}

/** One `<prefix>/data/<key>` entry, typed by the id that referred to it. */
export interface TorchStorage {
  readonly kind: 'storage'
  readonly key: string
  readonly dtype: TorchDtype
  /** Elements. */
  readonly numel: number
  readonly bytes: Uint8Array
}

/** A tensor as `_rebuild_tensor_v2` describes it: a strided view of a storage (all in elements). */
export interface TorchTensor {
  readonly kind: 'tensor'
  readonly storage: TorchStorage
  readonly offset: number
  readonly size: readonly number[]
  readonly stride: readonly number[]
}

interface StorageTypeGlobal extends PickleGlobal {
  readonly dtype: TorchDtype
}

/**
 * Views with more elements than this are refused: a stride-0 view of one element could otherwise
 * ask for gigabytes when materialised. Real LoRA tensors are a few million elements at most.
 */
const MAX_TENSOR_ELEMENTS = 2 ** 28

const refuse = (detail: string): TorchBinError => new TorchBinError(detail, { refused: true })
const damaged = (detail: string): TorchBinError => new TorchBinError(`data.pkl: ${detail}`)

const isCount = (v: PickleValue): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0

function counts(v: PickleValue, what: string): number[] {
  if (!(v instanceof PickleTuple) || !v.items.every(isCount)) {
    throw damaged(`a tensor's ${what} is ${describePickleValue(v)}, not a tuple of non-negative integers`)
  }
  return v.items as number[]
}

export function isTorchTensor(v: PickleValue): v is TorchTensor {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && 'kind' in v && v.kind === 'tensor'
}

function isStorage(v: PickleValue): v is TorchStorage {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && 'kind' in v && v.kind === 'storage'
}

function orderedDict(args: readonly PickleValue[]): PickleDict {
  const d = new PickleDict(true)
  if (args.length === 0) return d
  const [pairs] = args
  if (args.length !== 1 || !Array.isArray(pairs)) throw refuse('pickle builds an OrderedDict from unexpected arguments')
  for (const pair of pairs) {
    if (!(pair instanceof PickleTuple) || pair.items.length !== 2 || typeof pair.items[0] !== 'string') {
      throw refuse('pickle builds an OrderedDict from something other than (name, value) pairs')
    }
    d.map.set(pair.items[0], pair.items[1]!)
  }
  return d
}

function rebuildTensor(args: readonly PickleValue[]): TorchTensor {
  if (args.length !== 6 && args.length !== 7) {
    throw damaged(`_rebuild_tensor_v2 called with ${args.length} arguments, expected 6 or 7`)
  }
  const [storage, offset, sizeArg, strideArg, , hooks] = args
  if (!isStorage(storage!)) throw damaged(`_rebuild_tensor_v2's storage is ${describePickleValue(storage!)}`)
  if (!isCount(offset!)) throw damaged(`_rebuild_tensor_v2's storage offset is ${describePickleValue(offset!)}`)
  const size = counts(sizeArg!, 'size')
  const stride = counts(strideArg!, 'stride')
  if (size.length !== stride.length) {
    throw damaged(`a tensor has size [${size.join(', ')}] but stride [${stride.join(', ')}]`)
  }
  const numel = size.reduce((a, b) => a * b, 1)
  if (!Number.isSafeInteger(numel) || numel > MAX_TENSOR_ELEMENTS) {
    throw damaged(`a tensor of size [${size.join(', ')}] has more than ${MAX_TENSOR_ELEMENTS} elements`)
  }
  // Hooks would be functions, and functions are refused as globals; an empty dict is all torch writes.
  if (!(hooks instanceof PickleDict) || hooks.map.size > 0) throw refuse('pickle attaches backward hooks to a tensor')
  // The last element the view touches must lie inside the storage.
  if (!size.includes(0)) {
    const last = size.reduce((acc, n, i) => acc + (n - 1) * stride[i]!, offset)
    if (last >= storage.numel) {
      throw damaged(
        `a view (offset ${offset}, size [${size.join(', ')}], stride [${stride.join(', ')}]) reaches element ${last} of storage ${storage.key}, which holds ${storage.numel}`,
      )
    }
  }
  return { kind: 'tensor', storage, offset, size, stride }
}

function rebuildParameter(args: readonly PickleValue[]): TorchTensor {
  const [data, , hooks] = args
  if (args.length !== 3 || !isTorchTensor(data!)) throw damaged('_rebuild_parameter called without a tensor')
  if (!(hooks instanceof PickleDict) || hooks.map.size > 0)
    throw refuse('pickle attaches backward hooks to a parameter')
  return data
}

const GLOBALS: ReadonlyMap<string, PickleGlobal> = new Map<string, PickleGlobal>([
  [
    'collections.OrderedDict',
    { kind: 'global', qualname: 'collections.OrderedDict', call: orderedDict, construct: orderedDict },
  ],
  [
    'torch._utils._rebuild_tensor_v2',
    { kind: 'global', qualname: 'torch._utils._rebuild_tensor_v2', call: rebuildTensor },
  ],
  [
    'torch._utils._rebuild_parameter',
    { kind: 'global', qualname: 'torch._utils._rebuild_parameter', call: rebuildParameter },
  ],
  ...Object.entries(STORAGE_TYPES).map(([name, dtype]): [string, StorageTypeGlobal] => [
    `torch.${name}`,
    { kind: 'global', qualname: `torch.${name}`, dtype },
  ]),
])

/** The qualified names of every allowed global (for docs and tests). */
export const ALLOWED_GLOBALS: readonly string[] = [...GLOBALS.keys()]

/**
 * The policy for one archive. `storageBytes(key)` returns the raw bytes of `<prefix>/data/<key>`
 * (or throws); each storage is loaded once and shared by every tensor that views it.
 */
export function torchStateDictPolicy(storageBytes: (key: string) => Uint8Array): UnpicklePolicy {
  const storages = new Map<string, TorchStorage>()
  return {
    resolveGlobal: (module, name) => GLOBALS.get(`${module}.${name}`),

    persistentLoad(pid) {
      if (!(pid instanceof PickleTuple) || pid.items[0] !== 'storage') {
        throw refuse(`pickle has a persistent id that is ${describePickleValue(pid)}, not a ('storage', …) tuple`)
      }
      const [, type, key, location, numel] = pid.items
      if (pid.items.length !== 5) throw damaged(`a storage id has ${pid.items.length} fields, expected 5`)
      if (typeof type !== 'object' || type === null || !('dtype' in type)) {
        throw refuse(`a storage id names ${describePickleValue(type!)} as its type, not a torch storage class`)
      }
      const dtype = (type as StorageTypeGlobal).dtype
      if (typeof key !== 'string' || !/^[\w.-]+$/.test(key))
        throw damaged(`a storage key is ${describePickleValue(key!)}`)
      if (typeof location !== 'string') throw damaged(`storage ${key}'s location is ${describePickleValue(location!)}`)
      if (!isCount(numel!)) throw damaged(`storage ${key}'s element count is ${describePickleValue(numel!)}`)
      const seen = storages.get(key)
      if (seen !== undefined) {
        if (seen.dtype !== dtype || seen.numel !== numel) {
          throw damaged(`storage ${key} is referred to as both ${seen.dtype}[${seen.numel}] and ${dtype}[${numel}]`)
        }
        return seen
      }
      const bytes = storageBytes(key)
      const need = numel * TORCH_DTYPE_BYTES[dtype]
      if (bytes.length < need) {
        throw damaged(`storage ${key} holds ${bytes.length} bytes, but ${numel} ${dtype} elements need ${need}`)
      }
      const storage: TorchStorage = { kind: 'storage', key, dtype, numel, bytes }
      storages.set(key, storage)
      return storage
    },

    build(target, state) {
      // torch's state_dict() is an OrderedDict with a `_metadata` attribute (module versions).
      if (target instanceof PickleDict && target.ordered && (state === null || state instanceof PickleDict)) return
      throw refuse(`pickle sets the state of ${describePickleValue(target)}, which is not allowed`)
    },
  }
}
