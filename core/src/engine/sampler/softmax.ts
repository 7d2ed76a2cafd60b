import { blockedSum } from './blocked-sum.ts'

/**
 * Softmax helpers over raw logit rows and over candidate subsets. Sums run in float64 so a 50k-token
 * vocabulary loses no precision.
 */

/** `log Σ exp(logits[offset + v])` over one row of `vocabSize` logits (the raw log-softmax normaliser). */
export function logSumExp(logits: Float32Array, offset: number, vocabSize: number): number {
  let max = -Infinity
  for (let v = 0; v < vocabSize; v++) {
    const x = logits[offset + v]!
    if (x > max) max = x
  }
  return logSumExpBelow(logits, offset, vocabSize, max)
}

/** `logSumExp` when the row's largest logit (`max`, NaNs ignored) is already known. */
export function logSumExpBelow(logits: Float32Array, offset: number, vocabSize: number, max: number): number {
  if (max === -Infinity || Number.isNaN(max)) return max
  let sum = 0
  for (let v = 0; v < vocabSize; v++) sum += Math.exp(logits[offset + v]! - max)
  return max + Math.log(sum)
}

/**
 * Normalised probabilities of the candidates `ids[0, n)` under `values[id]`, written to `prob[id]`;
 * the normaliser is summed in `blockedSum`'s order over the candidates as listed. Returns
 * `log Σ exp(values)` over the candidates, so callers can form log-probabilities.
 */
export function softmaxOver(ids: Int32Array, n: number, values: Float32Array, prob: Float64Array): number {
  let max = -Infinity
  for (let i = 0; i < n; i++) {
    const x = values[ids[i]!]!
    if (x > max) max = x
  }
  for (let i = 0; i < n; i++) {
    const id = ids[i]!
    prob[id] = Math.exp(values[id]! - max)
  }
  // Blocked (blocked-sum.ts): this Σ decides the token, and a GPU adds its chunks in parallel.
  const sum = blockedSum(n, (i) => prob[ids[i]!]!)
  for (let i = 0; i < n; i++) prob[ids[i]!]! /= sum
  return max + Math.log(sum)
}
