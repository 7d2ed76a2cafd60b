import type { TokenConstraint } from '../../contracts/grammar.ts'

/**
 * Apply a request's structured-output constraint to its working logits: disallowed tokens become
 * -Infinity before any sampling. Once the constraint has terminated only eos may follow.
 * Returns false when the constraint has terminated and the request has no eos token to end with
 * (the caller then ends the sequence).
 */
export function applyConstraintMask(
  work: Float32Array,
  constraint: TokenConstraint,
  eosTokenIds: readonly number[],
  mask: Uint32Array,
): boolean {
  const vocabSize = work.length
  if (constraint.isTerminated()) {
    if (eosTokenIds.length === 0) return false
    const keep = new Map<number, number>()
    for (const id of eosTokenIds) if (id >= 0 && id < vocabSize) keep.set(id, work[id]!)
    work.fill(-Infinity)
    // An eos the model scored -Infinity must still be choosable: it is the only legal move.
    for (const [id, x] of keep) work[id] = x === -Infinity ? 0 : x
    return true
  }
  mask.fill(0)
  if (!constraint.fillNextTokenMask(mask)) return true
  const words = Math.ceil(vocabSize / 32)
  for (let w = 0; w < words; w++) {
    const bits = mask[w]!
    if (bits === 0xffffffff) continue
    const base = w << 5
    const end = Math.min(32, vocabSize - base)
    if (bits === 0) {
      work.fill(-Infinity, base, base + end)
      continue
    }
    for (let b = 0; b < end; b++) if (((bits >>> b) & 1) === 0) work[base + b] = -Infinity
  }
  return true
}

/**
 * Apply an allowed-token bitmask (`RowSampling.allowed`: words from `offset`) to working logits:
 * a cleared bit makes the token -Infinity. `terminated` (only eos may follow): an allowed token
 * the model scored -Infinity becomes 0, since it is the only legal move.
 */
export function applyAllowedMask(work: Float32Array, mask: Uint32Array, offset: number, terminated: boolean): void {
  const vocabSize = work.length
  const words = Math.ceil(vocabSize / 32)
  for (let w = 0; w < words; w++) {
    const bits = mask[offset + w]!
    const base = w << 5
    const end = Math.min(32, vocabSize - base)
    if (bits === 0xffffffff && !terminated) continue
    if (bits === 0) {
      work.fill(-Infinity, base, base + end)
      continue
    }
    for (let b = 0; b < end; b++) {
      if (((bits >>> b) & 1) === 0) work[base + b] = -Infinity
      else if (terminated && work[base + b] === -Infinity) work[base + b] = 0
    }
  }
}
