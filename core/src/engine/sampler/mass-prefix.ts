import { selectSmallest, sortRange } from './select.ts'

/**
 * Shared core of top-p and typical-p: order `ids[0, n)` by ascending `key` only as far as needed to
 * find the shortest prefix whose probability mass reaches `mass`. A token is kept while the mass of
 * the tokens before it is still below `mass` (Hugging Face's rule; at least one token is kept).
 * Returns the prefix length. Work is done in growing chunks (64, 256, …), so a peaked distribution
 * costs one selection pass plus a tiny sort.
 */
export function massPrefix(ids: Int32Array, n: number, key: Float64Array, prob: Float64Array, mass: number): number {
  let sorted = 0
  let cumulative = 0
  let chunk = 64
  while (sorted < n) {
    const end = Math.min(n, sorted + chunk)
    selectSmallest(ids, sorted, n, end - sorted, key)
    sortRange(ids, sorted, end, key)
    for (let i = sorted; i < end; i++) {
      if (i > 0 && cumulative >= mass) return i
      cumulative += prob[ids[i]!]!
    }
    sorted = end
    chunk *= 4
  }
  return n
}
