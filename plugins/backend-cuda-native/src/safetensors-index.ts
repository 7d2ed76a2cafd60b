/**
 * Lists the tensors of a model folder's safetensors files (single `model.safetensors` or sharded
 * with `model.safetensors.index.json`) by reading only their JSON headers; the addon mmaps the data.
 */
import { closeSync, existsSync, openSync, readFileSync, readSync } from 'node:fs'
import path from 'node:path'
import { LoomError } from '@loom/core'
import type { NativeTensor } from './load-native.ts'

/** safetensors dtype → the addon's dtype code. */
const DTYPES: Readonly<Record<string, number>> = { F32: 0, F16: 1, BF16: 2 }
const DTYPE_NAMES = ['float32', 'float16', 'bfloat16'] as const

export interface SafetensorsIndex {
  readonly files: string[]
  readonly tensors: NativeTensor[]
  /** Dtype name of the embedding table, reported as the model's dtype. */
  readonly dtype: string
}

function fail(dir: string, detail: string): LoomError {
  return new LoomError('model_invalid', { path: dir, detail })
}

function readHeader(dir: string, file: string): { size: number; header: Record<string, unknown> } {
  const fd = openSync(file, 'r')
  try {
    const lenBuf = Buffer.alloc(8)
    readSync(fd, lenBuf, 0, 8, 0)
    const size = Number(lenBuf.readBigUInt64LE(0))
    if (size <= 0 || size > 100_000_000) throw fail(dir, `${path.basename(file)} has a bad header length ${size}`)
    const buf = Buffer.alloc(size)
    readSync(fd, buf, 0, size, 8)
    return { size, header: JSON.parse(buf.toString('utf8')) as Record<string, unknown> }
  } catch (err) {
    if (err instanceof LoomError) throw err
    throw fail(dir, `${path.basename(file)} is not a readable safetensors file: ${(err as Error).message}`)
  } finally {
    closeSync(fd)
  }
}

/** Index every tensor of the model in `dir`. */
export function indexSafetensors(dir: string): SafetensorsIndex {
  const indexPath = path.join(dir, 'model.safetensors.index.json')
  let names: string[]
  if (existsSync(indexPath)) {
    const index = JSON.parse(readFileSync(indexPath, 'utf8')) as { weight_map?: Record<string, string> }
    names = [...new Set(Object.values(index.weight_map ?? {}))]
    if (names.length === 0) throw fail(dir, 'model.safetensors.index.json has an empty weight_map')
  } else if (existsSync(path.join(dir, 'model.safetensors'))) {
    names = ['model.safetensors']
  } else {
    throw fail(dir, 'no model.safetensors or model.safetensors.index.json (only safetensors weights are supported)')
  }
  const files = names.map((n) => path.join(dir, n))
  const tensors: NativeTensor[] = []
  let dtype = 'float32'
  files.forEach((file, fileIndex) => {
    const { size, header } = readHeader(dir, file)
    for (const [name, entry] of Object.entries(header)) {
      if (name === '__metadata__') continue
      const t = entry as { dtype: string; shape: number[]; data_offsets: [number, number] }
      const code = DTYPES[t.dtype]
      if (code === undefined)
        throw fail(dir, `tensor ${name} has dtype ${t.dtype}; the native runtime supports F32, F16 and BF16`)
      tensors.push({
        name,
        file: fileIndex,
        offset: 8 + size + t.data_offsets[0],
        nbytes: t.data_offsets[1] - t.data_offsets[0],
        dtype: code,
        shape: t.shape,
      })
      if (name === 'model.embed_tokens.weight') dtype = DTYPE_NAMES[code]!
    }
  })
  return { files, tensors, dtype }
}
