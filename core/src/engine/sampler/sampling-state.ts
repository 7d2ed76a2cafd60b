import type { SamplingParams } from '../../contracts/sampling.ts'
import type { PenaltyHistory } from './penalties.ts'
import { Xoshiro128StarStar } from './rng.ts'

const NO_PAIRS = new Int32Array(0)

/**
 * Everything the sampler remembers about one request: its own random stream and the token
 * statistics the penalties read. It survives preemption, so a recomputed sequence continues the
 * same stream.
 */
export class SamplingState implements PenaltyHistory {
  readonly sampling: SamplingParams
  readonly rng: Xoshiro128StarStar
  readonly seen = new Set<number>()
  readonly outputCounts = new Map<number, number>()
  /** `nextFloat` draws made so far (one per sampled, non-greedy token): `RowSampling.draws`. */
  draws = 0

  constructor(sampling: SamplingParams, promptIds: readonly number[]) {
    this.sampling = sampling
    this.rng = new Xoshiro128StarStar(sampling.seed)
    // Only the repetition penalty looks at the prompt; skip the set for the common case.
    if (sampling.repetitionPenalty !== 1) for (const id of promptIds) this.seen.add(id)
  }

  /** Record a generated token. */
  record(id: number): void {
    if (this.sampling.repetitionPenalty !== 1) this.seen.add(id)
    if (this.sampling.frequencyPenalty !== 0 || this.sampling.presencePenalty !== 0) {
      this.outputCounts.set(id, (this.outputCounts.get(id) ?? 0) + 1)
    }
  }

  /** True when a token chosen under these parameters draws from the stream (not greedy). */
  get drawsPerToken(): 0 | 1 {
    return this.sampling.temperature > 0 && this.sampling.topK !== 1 ? 1 : 0
  }

  /** The history as `RowSampling.penalties`: distinct `(id, output count)` pairs; empty when no penalty is on. */
  penaltyPairs(): Int32Array {
    // Every row of every step asks: without a penalty both collections stay empty.
    if (this.seen.size === 0 && this.outputCounts.size === 0) return NO_PAIRS
    const ids = new Set<number>(this.seen)
    for (const id of this.outputCounts.keys()) ids.add(id)
    const out = new Int32Array(2 * ids.size)
    let i = 0
    for (const id of ids) {
      out[i++] = id
      out[i++] = this.outputCounts.get(id) ?? 0
    }
    return out
  }
}
