import type { WarpScratch } from './candidates.ts'
import { massPrefix } from './mass-prefix.ts'
import { softmaxOver } from './softmax.ts'

/**
 * Nucleus sampling (Holtzman et al. 2019): keep the most likely candidates until their mass reaches
 * `p` (renormalised over the current candidates). Returns the new candidate count.
 */
export function topP(work: Float32Array, scratch: WarpScratch, n: number, p: number): number {
  if (p >= 1 || n <= 1) return n
  const { ids, key, prob } = scratch
  softmaxOver(ids, n, work, prob)
  for (let i = 0; i < n; i++) key[ids[i]!] = -prob[ids[i]!]!
  return massPrefix(ids, n, key, prob, p)
}
