/**
 * Packs a `StepBatch` into the flat typed arrays the addon's `step` reads (layout documented at
 * `Runtime::Step` in native/src/binding.cc). The addon re-checks every offset; this side only
 * concatenates, and sizes the output buffers the engine receives.
 */
import type { StepBatch } from '@loom/core'
import type { NativePackedStep } from './load-native.ts'

/** Integers per row in `rows`. */
export const ROW_FIELDS = 13

type Arrays = {
  i32: Int32Array
  u8: Uint8Array
  f32: Float32Array
  f64: Float64Array
}

/**
 * Grow-only arrays a runner reuses from step to step, handed out as exact-length views: a decode
 * step of a small model is ~0.1 ms, and a dozen fresh typed arrays a step (logits and Medusa
 * head logits are tens to hundreds of KB) cost allocation, zeroing and garbage-collector pauses
 * comparable to the step. Valid because steps never overlap and the engine reads a step's output
 * before it asks for the next one (see `StepOutput`).
 */
export class StepBuffers {
  private readonly arrays = new Map<string, Arrays[keyof Arrays]>()

  view<K extends keyof Arrays>(name: string, kind: K, length: number): Arrays[K] {
    let a = this.arrays.get(name) as Arrays[K] | undefined
    if (a === undefined || a.length < length) {
      const make = { i32: Int32Array, u8: Uint8Array, f32: Float32Array, f64: Float64Array }[kind]
      a = new make(Math.max(length, (a?.length ?? 0) * 2)) as Arrays[K]
      this.arrays.set(name, a)
    }
    return a.subarray(0, length) as Arrays[K]
  }
}

/** Fresh arrays every call (no reuse). */
const FRESH = {
  view<K extends keyof Arrays>(_name: string, kind: K, length: number): Arrays[K] {
    const make = { i32: Int32Array, u8: Uint8Array, f32: Float32Array, f64: Float64Array }[kind]
    return new make(length) as Arrays[K]
  },
}

/**
 * @param medusaHeads heads of a loaded Medusa slot (0 when the slot holds none).
 * @param buffers where the arrays come from: reused views of `StepBuffers`, or fresh ones.
 */
export function packStep(
  batch: StepBatch,
  vocabSize: number,
  medusaHeads: (slot: number) => number,
  buffers: Pick<StepBuffers, 'view'> = FRESH,
): NativePackedStep {
  let tokenCount = 0
  let blockCount = 0
  let maskBytes = 0
  let indexCount = 0
  let logitRows = 0
  let medusaRows = 0
  for (const row of batch.rows) {
    tokenCount += row.tokens.length
    blockCount += row.blockTable.length
    if (row.treeMask) maskBytes += row.treeMask.length
    indexCount += row.logitIndices.length + row.medusaIndices.length
    logitRows += row.logitIndices.length
    if (row.medusaLeaf) medusaRows += medusaHeads(row.medusaSlot)
    else if (row.medusaIndices.length > 0) medusaRows += row.medusaIndices.length * medusaHeads(row.medusaSlot)
  }
  const tokens = buffers.view('tokens', 'i32', tokenCount)
  const positions = buffers.view('positions', 'i32', tokenCount)
  const rows = buffers.view('rows', 'i32', batch.rows.length * ROW_FIELDS)
  const blockTables = buffers.view('blockTables', 'i32', blockCount)
  const masks = buffers.view('masks', 'u8', maskBytes)
  const indices = buffers.view('indices', 'i32', indexCount)
  let t = 0
  let b = 0
  let m = 0
  let ix = 0
  batch.rows.forEach((row, r) => {
    const n = row.tokens.length
    tokens.set(row.tokens, t)
    positions.set(row.positions.subarray(0, n), t)
    blockTables.set(row.blockTable, b)
    let maskOffset = -1
    if (row.treeMask) {
      masks.set(row.treeMask, m)
      maskOffset = m
      m += row.treeMask.length
    }
    indices.set(row.logitIndices, ix)
    indices.set(row.medusaIndices, ix + row.logitIndices.length)
    const f = r * ROW_FIELDS
    rows[f] = t
    rows[f + 1] = n
    rows[f + 2] = row.cacheLen
    rows[f + 3] = row.loraSlot
    rows[f + 4] = row.medusaSlot
    rows[f + 5] = b
    rows[f + 6] = row.blockTable.length
    rows[f + 7] = maskOffset
    rows[f + 8] = ix
    rows[f + 9] = row.logitIndices.length
    rows[f + 10] = ix + row.logitIndices.length
    rows[f + 11] = row.medusaIndices.length
    rows[f + 12] = row.medusaLeaf ? 1 : 0
    t += n
    b += row.blockTable.length
    ix += row.logitIndices.length + row.medusaIndices.length
  })

  // Cache moves: [btOffset, btLen, fromOffset, toOffset, count] into copyData.
  let copyLen = 0
  for (const c of batch.kvCopies) copyLen += c.blockTable.length + 2 * c.from.length
  const copies = buffers.view('copies', 'i32', batch.kvCopies.length * 5)
  const copyData = buffers.view('copyData', 'i32', copyLen)
  let o = 0
  batch.kvCopies.forEach((c, i) => {
    const count = Math.min(c.from.length, c.to.length)
    copyData.set(c.blockTable, o)
    copyData.set(c.from.subarray(0, count), o + c.blockTable.length)
    copyData.set(c.to.subarray(0, count), o + c.blockTable.length + count)
    copies.set([o, c.blockTable.length, o + c.blockTable.length, o + c.blockTable.length + count, count], i * 5)
    o += c.blockTable.length + 2 * count
  })

  return {
    tokens,
    positions,
    rows,
    blockTables,
    masks,
    indices,
    copies,
    copyData,
    logits: buffers.view('logits', 'f32', logitRows * vocabSize),
    medusaLogits: buffers.view('medusaLogits', 'f32', medusaRows * vocabSize),
    logNorms: buffers.view('logNorms', 'f64', logitRows),
    argmax: buffers.view('argmax', 'i32', logitRows),
    medusaLeaves: buffers.view('medusaLeaves', 'i32', batch.rows.length),
    ...(batch.medusaTopK !== undefined && batch.medusaTopK > 0 && medusaRows > 0
      ? {
          medusaTopK: batch.medusaTopK,
          medusaTopIds: buffers.view('medusaTopIds', 'i32', medusaRows * batch.medusaTopK),
        }
      : {}),
  }
}
