/** Scratch arrays sized to the vocabulary, reused across rows (one set per engine). */
export interface WarpScratch {
  /** Candidate token ids; the warpers shrink the prefix `[0, n)`. */
  readonly ids: Int32Array
  /** Ordering key per token id (smaller is better). */
  readonly key: Float64Array
  /** Probability per token id of the current candidates. */
  readonly prob: Float64Array
}

export function createWarpScratch(vocabSize: number): WarpScratch {
  return {
    ids: new Int32Array(vocabSize),
    key: new Float64Array(vocabSize),
    prob: new Float64Array(vocabSize),
  }
}

/** Collect every token not masked to -Infinity (and not NaN) into `ids`, in id order. Returns the count. */
export function collectCandidates(work: Float32Array, ids: Int32Array): number {
  let n = 0
  for (let v = 0; v < work.length; v++) {
    if (work[v]! > -Infinity) ids[n++] = v
  }
  return n
}

/**
 * Index of the largest value of `work[offset, offset + n)` (first on ties) in one pass, relative
 * to `offset`, or -1 when every value is -Infinity/NaN. Default: the whole array.
 */
export function argmax(work: Float32Array, offset = 0, n = work.length - offset): number {
  let best = -1
  let bestValue = -Infinity
  for (let v = 0; v < n; v++) {
    const x = work[offset + v]!
    if (x > bestValue) {
      bestValue = x
      best = v
    }
  }
  return best
}
