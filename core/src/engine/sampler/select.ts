/**
 * Partial ordering of candidate token ids by a key, so warpers never sort the whole vocabulary:
 * quickselect moves the k best ids to the front, then only those are sorted. The order is
 * (key ascending, then id ascending): a strict total order, so which ids a selection brings to the
 * front never depends on how it got there (a GPU finds the same set by radix selection).
 */

/** True when `a` comes before `b`: a smaller key, or the same key and a smaller id. */
function before(key: Float64Array, a: number, b: number): boolean {
  const ka = key[a]!
  const kb = key[b]!
  return ka < kb || (ka === kb && a < b)
}

/**
 * Rearrange `ids[lo, hi)` so that `ids[lo, lo + k)` hold the `k` first ids in (key, id) order (in
 * no particular order among themselves). Expected O(hi - lo). Keys must not be NaN.
 */
export function selectSmallest(ids: Int32Array, lo: number, hi: number, k: number, key: Float64Array): void {
  if (k <= 0 || k >= hi - lo) return
  const target = lo + k - 1
  let left = lo
  let right = hi - 1
  while (right > left) {
    const pivot = medianOfThree(key, ids[left]!, ids[(left + right) >>> 1]!, ids[right]!)
    let i = left
    let j = right
    // Hoare partition around the pivot id (distinct ids: only the pivot itself compares equal).
    while (i <= j) {
      while (before(key, ids[i]!, pivot)) i++
      while (before(key, pivot, ids[j]!)) j--
      if (i <= j) {
        const tmp = ids[i]!
        ids[i] = ids[j]!
        ids[j] = tmp
        i++
        j--
      }
    }
    if (target <= j) right = j
    else if (target >= i) left = i
    else return
  }
}

/** Sort `ids[lo, hi)` in (key, id) order. */
export function sortRange(ids: Int32Array, lo: number, hi: number, key: Float64Array): void {
  if (hi - lo < 2) return
  ids.subarray(lo, hi).sort((a, b) => key[a]! - key[b]! || a - b)
}

/** The id among three that is second in (key, id) order. */
function medianOfThree(key: Float64Array, a: number, b: number, c: number): number {
  if (before(key, a, b)) return before(key, b, c) ? b : before(key, a, c) ? c : a
  return before(key, a, c) ? a : before(key, b, c) ? c : b
}
