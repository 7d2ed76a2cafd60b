/**
 * Packs a `StepBatch` into the flat typed arrays the addon's `step` reads (layout documented at
 * `Runtime::Step` in native/src/binding.cc). The addon re-checks every offset; this side only
 * concatenates, and sizes the output buffers the engine receives.
 */
import type { StepBatch } from '@loom/core'
import type { NativePackedStep } from './load-native.ts'

/** Integers per row in `rows`. */
export const ROW_FIELDS = 12

/**
 * @param medusaHeads heads of a loaded Medusa slot (0 when the slot holds none).
 */
export function packStep(batch: StepBatch, vocabSize: number, medusaHeads: (slot: number) => number): NativePackedStep {
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
    if (row.medusaIndices.length > 0) medusaRows += row.medusaIndices.length * medusaHeads(row.medusaSlot)
  }
  const tokens = new Int32Array(tokenCount)
  const positions = new Int32Array(tokenCount)
  const rows = new Int32Array(batch.rows.length * ROW_FIELDS)
  const blockTables = new Int32Array(blockCount)
  const masks = new Uint8Array(maskBytes)
  const indices = new Int32Array(indexCount)
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
    rows.set(
      [
        t,
        n,
        row.cacheLen,
        row.loraSlot,
        row.medusaSlot,
        b,
        row.blockTable.length,
        maskOffset,
        ix,
        row.logitIndices.length,
        ix + row.logitIndices.length,
        row.medusaIndices.length,
      ],
      r * ROW_FIELDS,
    )
    t += n
    b += row.blockTable.length
    ix += row.logitIndices.length + row.medusaIndices.length
  })

  // Cache moves: [btOffset, btLen, fromOffset, toOffset, count] into copyData.
  let copyLen = 0
  for (const c of batch.kvCopies) copyLen += c.blockTable.length + 2 * c.from.length
  const copies = new Int32Array(batch.kvCopies.length * 5)
  const copyData = new Int32Array(copyLen)
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
    logits: new Float32Array(logitRows * vocabSize),
    medusaLogits: new Float32Array(medusaRows * vocabSize),
    logNorms: new Float64Array(logitRows),
  }
}
