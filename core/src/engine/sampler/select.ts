/**
 * Partial ordering of candidate token ids by a key, so warpers never sort the whole vocabulary:
 * quickselect moves the k best ids to the front, then only those are sorted.
 */

/**
 * Rearrange `ids[lo, hi)` so that `ids[lo, lo + k)` hold the `k` ids with the smallest `key[id]`
 * (in no particular order). Expected O(hi - lo). Keys must not be NaN.
 */
export function selectSmallest(ids: Int32Array, lo: number, hi: number, k: number, key: Float64Array): void {
  if (k <= 0 || k >= hi - lo) return
  const target = lo + k - 1
  let left = lo
  let right = hi - 1
  while (right > left) {
    const mid = (left + right) >>> 1
    const pivot = medianOfThree(key[ids[left]!]!, key[ids[mid]!]!, key[ids[right]!]!)
    let i = left
    let j = right
    // Hoare partition: afterwards [left, j] <= pivot, [i, right] >= pivot, (j, i) == pivot.
    while (i <= j) {
      while (key[ids[i]!]! < pivot) i++
      while (key[ids[j]!]! > pivot) j--
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

/** Sort `ids[lo, hi)` by ascending `key[id]`, ties by ascending id (stable, deterministic). */
export function sortRange(ids: Int32Array, lo: number, hi: number, key: Float64Array): void {
  if (hi - lo < 2) return
  ids.subarray(lo, hi).sort((a, b) => key[a]! - key[b]! || a - b)
}

function medianOfThree(a: number, b: number, c: number): number {
  if (a < b) return b < c ? b : a < c ? c : a
  return a < c ? a : b < c ? c : b
}
