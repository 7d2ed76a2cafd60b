import { blockedSum } from './blocked-sum.ts'
import type { WarpScratch } from './candidates.ts'
import { massPrefix } from './mass-prefix.ts'
import { softmaxOver } from './softmax.ts'

/**
 * Locally typical sampling (Meister et al. 2022): order candidates by `|-log p - H|` (how far their
 * surprisal is from the distribution's entropy) and keep them until their mass reaches `mass`.
 * Returns the new candidate count.
 */
export function typicalP(work: Float32Array, scratch: WarpScratch, n: number, mass: number): number {
  if (mass >= 1 || n <= 1) return n
  const { ids, key, prob } = scratch
  const logNorm = softmaxOver(ids, n, work, prob)
  // -Σ p·log p, blocked (blocked-sum.ts): it sets every key, so it decides the cut.
  const entropy = -blockedSum(n, (i) => {
    const id = ids[i]!
    const p = prob[id]!
    return p > 0 ? p * (work[id]! - logNorm) : 0
  })
  // -log p = logNorm - logit
  for (let i = 0; i < n; i++) {
    const id = ids[i]!
    key[id] = Math.abs(logNorm - work[id]! - entropy)
  }
  return massPrefix(ids, n, key, prob, mass)
}
