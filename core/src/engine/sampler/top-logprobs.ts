import type { TokenLogprob } from '../../contracts/sampling.ts'
import type { WarpScratch } from './candidates.ts'
import { selectSmallest, sortRange } from './select.ts'

/**
 * The `count` most likely tokens of one raw logit row (most likely first) with their log-softmax,
 * `logit - logNorm`. Quickselect plus a sort of `count` ids.
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
  for (let v = 0; v < vocabSize; v++) {
    ids[v] = v
    const x = logits[offset + v]!
    key[v] = Number.isNaN(x) ? Infinity : -x
  }
  selectSmallest(ids, 0, vocabSize, k, key)
  sortRange(ids, 0, k, key)
  const out: TokenLogprob[] = []
  for (let i = 0; i < k; i++) {
    const id = ids[i]!
    out.push({ id, logprob: logits[offset + id]! - logNorm })
  }
  return out
}
