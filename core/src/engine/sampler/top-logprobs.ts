import type { TokenLogprob } from '../../contracts/sampling.ts'
import type { WarpScratch } from './candidates.ts'
import { HEAP_SELECT_MAX, kthLargestOf, partitionAtLeast } from './kth-largest.ts'
import { selectSmallest, sortRange } from './select.ts'

/**
 * The `count` most likely tokens of one raw logit row (most likely first, ties by id) with their
 * log-softmax, `logit - logNorm`. One heap pass finds the count-th logit; only the tokens at or
 * above it are sorted.
 */
export function topLogprobs(
  logits: Float32Array,
  offset: number,
  vocabSize: number,
  logNorm: number,
  count: number,
  scratch: WarpScratch,
): TokenLogprob[] {
  const { ids, key } = scratch
  const k = Math.min(count, vocabSize)
  const row = logits.subarray(offset, offset + vocabSize)
  for (let v = 0; v < vocabSize; v++) ids[v] = v
  let m: number
  if (k <= HEAP_SELECT_MAX) {
    m = partitionAtLeast(row, ids, vocabSize, kthLargestOf(row, ids, vocabSize, k, key))
  } else {
    for (let v = 0; v < vocabSize; v++) key[v] = Number.isNaN(row[v]!) ? Infinity : -row[v]!
    selectSmallest(ids, 0, vocabSize, k, key)
    m = k
  }
  for (let i = 0; i < m; i++) key[ids[i]!] = -row[ids[i]!]!
  sortRange(ids, 0, m, key)
  const out: TokenLogprob[] = []
  for (let i = 0; i < Math.min(k, m); i++) {
    const id = ids[i]!
    out.push({ id, logprob: row[id]! - logNorm })
  }
  return out
}
