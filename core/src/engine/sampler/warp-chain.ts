import type { SamplingParams } from '../../contracts/sampling.ts'
import { collectCandidates, type WarpScratch } from './candidates.ts'
import { softmaxOver } from './softmax.ts'
import { applyTemperature } from './temperature.ts'
import { topK } from './top-k.ts'
import { topP } from './top-p.ts'
import { typicalP } from './typical-p.ts'

/**
 * The warper chain for a sampled (temperature > 0) token, in TGI's order: top-k, temperature,
 * top-p, typical-p (top-k before temperature is equivalent to after: scaling keeps the order, and
 * scaling fewer logits is cheaper). Leaves the final distribution in `scratch.prob` over
 * `scratch.ids[0, n)` and returns `n` (0 when no token is allowed). Scales `work` in place.
 */
export function warp(work: Float32Array, scratch: WarpScratch, sampling: SamplingParams): number {
  let n = collectCandidates(work, scratch.ids)
  if (n === 0) return 0
  n = topK(work, scratch, n, sampling.topK)
  applyTemperature(work, scratch.ids, n, sampling.temperature)
  n = topP(work, scratch, n, sampling.topP)
  n = typicalP(work, scratch, n, sampling.typicalP)
  softmaxOver(scratch.ids, n, work, scratch.prob)
  return n
}
