import type { SamplingParams } from '../../contracts/sampling.ts'

/** What the penalties need to know about a sequence's history. */
export interface PenaltyHistory {
  /** Distinct tokens of prompt and output (repetition penalty). */
  readonly seen: ReadonlySet<number>
  /** Occurrences of each token in the output only (frequency and presence penalties). */
  readonly outputCounts: ReadonlyMap<number, number>
}

/** True when any penalty would change the logits. */
export function penaltiesActive(sampling: SamplingParams): boolean {
  return sampling.repetitionPenalty !== 1 || sampling.frequencyPenalty !== 0 || sampling.presencePenalty !== 0
}

/**
 * Apply the penalties in place, in Hugging Face/TGI order:
 * - repetition (CTRL, Keskar et al. 2019), over prompt + output: a positive logit is divided by the
 *   penalty, a negative one multiplied, so the token always becomes less likely;
 * - frequency and presence (OpenAI), over output only: `logit -= count·frequency + (count > 0)·presence`.
 * Costs O(distinct tokens), not O(vocab).
 */
export function applyPenalties(work: Float32Array, history: PenaltyHistory, sampling: SamplingParams): void {
  const rep = sampling.repetitionPenalty
  if (rep !== 1) {
    for (const id of history.seen) {
      if (id < 0 || id >= work.length) continue
      const x = work[id]!
      work[id] = x < 0 ? x * rep : x / rep
    }
  }
  const freq = sampling.frequencyPenalty
  const presence = sampling.presencePenalty
  if (freq !== 0 || presence !== 0) {
    for (const [id, count] of history.outputCounts) {
      if (id < 0 || id >= work.length) continue
      work[id] = work[id]! - count * freq - presence
    }
  }
}
