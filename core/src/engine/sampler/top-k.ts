import type { WarpScratch } from './candidates.ts'
import { selectSmallest } from './select.ts'

/**
 * Keep the `k` highest logits among the candidates `ids[0, n)`, plus any token tied with the k-th
 * (Hugging Face keeps ties). Quickselect, no sort. Returns the new candidate count.
 */
export function topK(work: Float32Array, scratch: WarpScratch, n: number, k: number): number {
  if (k <= 0 || k >= n) return n
  const { ids, key } = scratch
  for (let i = 0; i < n; i++) key[ids[i]!] = -work[ids[i]!]!
  selectSmallest(ids, 0, n, k, key)
  let threshold = -Infinity
  for (let i = 0; i < k; i++) threshold = Math.max(threshold, key[ids[i]!]!)
  let kept = k
  for (let i = k; i < n; i++) {
    if (key[ids[i]!]! === threshold) {
      const tmp = ids[kept]!
      ids[kept] = ids[i]!
      ids[i] = tmp
      kept++
    }
  }
  return kept
}
