/** Largest `k` the heap path handles; beyond it callers fall back to quickselect. */
export const HEAP_SELECT_MAX = 1024

/**
 * The k-th largest of `values[ids[i]]` for `i < n` (1 <= k <= n, k <= HEAP_SELECT_MAX), in one
 * pass with a size-k min-heap: almost every value is rejected by one comparison with the heap's
 * root, so this beats an indirect quickselect for the small k of top-k and top-N logprobs.
 * NaN values are ignored. `heap` is scratch of at least `k` entries.
 */
export function kthLargestOf(values: Float32Array, ids: Int32Array, n: number, k: number, heap: Float64Array): number {
  let size = 0
  for (let i = 0; i < n; i++) {
    const x = values[ids[i]!]!
    if (size < k) {
      if (Number.isNaN(x)) continue
      // Sift up.
      let at = size++
      while (at > 0) {
        const parent = (at - 1) >> 1
        if (heap[parent]! <= x) break
        heap[at] = heap[parent]!
        at = parent
      }
      heap[at] = x
    } else if (x > heap[0]!) {
      // Replace the root and sift down.
      let at = 0
      for (;;) {
        const left = 2 * at + 1
        if (left >= k) break
        const right = left + 1
        const child = right < k && heap[right]! < heap[left]! ? right : left
        if (heap[child]! >= x) break
        heap[at] = heap[child]!
        at = child
      }
      heap[at] = x
    }
  }
  return size < k ? -Infinity : heap[0]!
}

/** Move every id with `values[id] >= threshold` to the front of `ids[0, n)`; returns their count. */
export function partitionAtLeast(values: Float32Array, ids: Int32Array, n: number, threshold: number): number {
  let kept = 0
  for (let i = 0; i < n; i++) {
    const id = ids[i]!
    if (values[id]! >= threshold) {
      ids[i] = ids[kept]!
      ids[kept++] = id
    }
  }
  return kept
}

/**
 * The `k`-th largest (1 <= k <= n) of `values[0, n)`, which it reorders. Iterative quickselect;
 * only the value is defined, so any selection gives the same result (no NaN).
 */
export function kthLargestValue(values: Float32Array | Float64Array, n: number, k: number): number {
  let lo = 0
  let hi = n - 1
  const target = k - 1
  while (lo < hi) {
    // Median of three as pivot keeps sorted or constant inputs linear.
    const mid = (lo + hi) >>> 1
    const a = values[lo]!
    const b = values[mid]!
    const c = values[hi]!
    const pivot = a > b ? (b > c ? b : a > c ? c : a) : a > c ? a : b > c ? c : b
    let i = lo
    let j = hi
    while (i <= j) {
      while (values[i]! > pivot) i++
      while (values[j]! < pivot) j--
      if (i <= j) {
        const tmp = values[i]!
        values[i] = values[j]!
        values[j] = tmp
        i++
        j--
      }
    }
    if (target <= j) hi = j
    else if (target >= i) lo = i
    else return values[target]!
  }
  return values[target]!
}
