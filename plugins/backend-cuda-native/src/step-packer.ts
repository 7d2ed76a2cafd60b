/**
 * Packs a `StepBatch` into the flat typed arrays the addon's `step` reads (layout documented at
 * `Runtime::Step` in native/src/binding.cc). The addon re-checks every offset; this side only
 * concatenates, and sizes the output arrays the step fills (tokens, never logits).
 */
import type { StepBatch } from '@loom/core'
import type { NativePackedStep } from './load-native.ts'

/** Integers per row in `rows`. */
export const ROW_FIELDS = 13

type Arrays = {
  i32: Int32Array
  u8: Uint8Array
  u32: Uint32Array
  f32: Float32Array
  f64: Float64Array
  u64: BigUint64Array
}
const MAKE = {
  i32: Int32Array,
  u8: Uint8Array,
  u32: Uint32Array,
  f32: Float32Array,
  f64: Float64Array,
  u64: BigUint64Array,
}

/**
 * Grow-only arrays a runner reuses from step to step, handed out as exact-length views: a decode
 * step of a small model is ~0.1 ms, and a dozen fresh typed arrays a step cost allocation, zeroing
 * and garbage-collector pauses comparable to the step. Valid because steps never overlap and the
 * engine reads a step's output before it asks for the next one (see `StepOutput`).
 */
export class StepBuffers {
  private readonly arrays = new Map<string, Arrays[keyof Arrays]>()

  view<K extends keyof Arrays>(name: string, kind: K, length: number): Arrays[K] {
    let a = this.arrays.get(name) as Arrays[K] | undefined
    if (a === undefined || a.length < length) {
      a = new MAKE[kind](Math.max(length, (a?.length ?? 0) * 2)) as Arrays[K]
      this.arrays.set(name, a)
    }
    return a.subarray(0, length) as Arrays[K]
  }
}

/** Fresh arrays every call (no reuse). */
const FRESH = {
  view<K extends keyof Arrays>(_name: string, kind: K, length: number): Arrays[K] {
    return new MAKE[kind](length) as Arrays[K]
  },
}

/** @param buffers where the arrays come from: reused views of `StepBuffers`, or fresh ones. */
export function packStep(
  batch: StepBatch,
  vocabSize: number,
  buffers: Pick<StepBuffers, 'view'> = FRESH,
): NativePackedStep {
  const W = Math.ceil(vocabSize / 32)
  let tokenCount = 0
  let blockCount = 0
  let maskBytes = 0
  let targetCount = 0
  let samplings = 0
  let pairs = 0
  let maskedPositions = 0
  let sampled = 0
  let scored = 0
  let drafts = 0
  for (const row of batch.rows) {
    tokenCount += row.tokens.length
    blockCount += row.blockTable.length
    if (row.treeMask) maskBytes += row.treeMask.length
    targetCount += row.scoreTargets.length
    for (const target of row.scoreTargets) if (target >= 0) scored++
    const s = row.sampling
    if (s !== null) {
      const positions = row.treeMask ? row.tokens.length : 1
      samplings++
      sampled += positions
      pairs += s.penalties.length >> 1
      if (s.allowed !== null) maskedPositions += positions
    }
    if (row.medusaSlot >= 0) drafts += row.medusaHeads * batch.draftTopK
  }
  const tokens = buffers.view('tokens', 'i32', tokenCount)
  const positions = buffers.view('positions', 'i32', tokenCount)
  const rows = buffers.view('rows', 'i32', batch.rows.length * ROW_FIELDS)
  const blockTables = buffers.view('blockTables', 'i32', blockCount)
  const masks = buffers.view('masks', 'u8', maskBytes)
  const scoreTargets = buffers.view('scoreTargets', 'i32', targetCount)
  const sampleFloats = buffers.view('sampleFloats', 'f64', samplings * 6)
  const sampleInts = buffers.view('sampleInts', 'i32', samplings * 2)
  const sampleSeeds = buffers.view('sampleSeeds', 'u64', samplings * 2)
  const penaltyStart = buffers.view('penaltyStart', 'i32', samplings + 1)
  const penalties = buffers.view('penalties', 'i32', pairs * 2)
  const allowed = buffers.view('allowed', 'u32', maskedPositions * W)
  const terminated = buffers.view('terminated', 'u8', maskedPositions)
  let t = 0
  let b = 0
  let m = 0
  let st = 0
  let k = 0
  let pen = 0
  let mp = 0
  penaltyStart[0] = 0
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
    scoreTargets.set(row.scoreTargets, st)
    const f = r * ROW_FIELDS
    rows[f] = t
    rows[f + 1] = n
    rows[f + 2] = row.cacheLen
    rows[f + 3] = row.loraSlot
    rows[f + 4] = row.medusaSlot
    rows[f + 5] = b
    rows[f + 6] = row.blockTable.length
    rows[f + 7] = maskOffset
    rows[f + 8] = st
    rows[f + 9] = row.scoreTargets.length
    rows[f + 10] = -1
    rows[f + 11] = -1
    rows[f + 12] = row.medusaSlot >= 0 ? row.medusaHeads : 0
    const s = row.sampling
    if (s !== null) {
      const p = s.params
      const fo = k * 6 // element by element: no array allocated per row and step
      sampleFloats[fo] = p.temperature
      sampleFloats[fo + 1] = p.topP
      sampleFloats[fo + 2] = p.typicalP
      sampleFloats[fo + 3] = p.repetitionPenalty
      sampleFloats[fo + 4] = p.frequencyPenalty
      sampleFloats[fo + 5] = p.presencePenalty
      sampleInts[k * 2] = p.topK
      sampleInts[k * 2 + 1] = s.topLogprobs
      sampleSeeds[k * 2] = p.seed
      sampleSeeds[k * 2 + 1] = BigInt(s.draws)
      penalties.set(s.penalties, pen * 2)
      pen += s.penalties.length >> 1
      penaltyStart[k + 1] = pen
      rows[f + 10] = k++
      if (s.allowed !== null) {
        const count = row.treeMask ? n : 1
        allowed.set(s.allowed.subarray(0, count * W), mp * W)
        if (s.terminated !== null) terminated.set(s.terminated.subarray(0, count), mp)
        else terminated.fill(0, mp, mp + count)
        rows[f + 11] = mp
        mp += count
      }
    }
    t += n
    b += row.blockTable.length
    st += row.scoreTargets.length
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
    scoreTargets,
    sampleFloats,
    sampleInts,
    sampleSeeds,
    penaltyStart,
    penalties,
    allowed,
    terminated,
    copies,
    copyData,
    maxTop: batch.topLogprobs,
    draftTopK: batch.draftTopK,
    sampledTokens: buffers.view('sampledTokens', 'i32', sampled),
    sampledLogprobs: buffers.view('sampledLogprobs', 'f32', sampled),
    topIds: buffers.view('topIds', 'i32', sampled * batch.topLogprobs),
    topLogprobs: buffers.view('topLogprobs', 'f32', sampled * batch.topLogprobs),
    scores: buffers.view('scores', 'f32', scored),
    walkEnds: buffers.view('walkEnds', 'i32', batch.rows.length),
    draftIds: buffers.view('draftIds', 'i32', drafts),
  }
}
