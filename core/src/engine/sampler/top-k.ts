import type { WarpScratch } from './candidates.ts'
import { HEAP_SELECT_MAX, kthLargestOf, kthLargestValue, partitionAtLeast } from './kth-largest.ts'

/**
 * Keep the `k` highest logits among the candidates `ids[0, n)`, plus any token tied with the k-th
 * (Hugging Face keeps ties). No sort: a heap pass (small k) or quickselect finds the k-th value,
 * then one pass keeps everything at or above it, in the candidates' order. Returns the new
 * candidate count.
 */
export function topK(work: Float32Array, scratch: WarpScratch, n: number, k: number): number {
  if (k <= 0 || k >= n) return n
  const { ids, key } = scratch
  let threshold: number
  if (k <= HEAP_SELECT_MAX) {
    threshold = kthLargestOf(work, ids, n, k, key)
  } else {
    // Selected by position in a copy: ids keep their id order.
    for (let i = 0; i < n; i++) key[i] = work[ids[i]!]!
    threshold = kthLargestValue(key, n, k)
  }
  return partitionAtLeast(work, ids, n, threshold)
}
