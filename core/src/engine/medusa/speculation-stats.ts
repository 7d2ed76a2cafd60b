/** Counters of Medusa speculation since the engine started (`BatchingEngine.speculationStats()`). */
export interface SpeculationStats {
  /** Verification rows run (one per speculating sequence per step). */
  readonly verifySteps: number
  /** Tokens those rows emitted: one sampled token plus the accepted candidates each. */
  readonly emittedTokens: number
  /** Accepted candidates (the tokens reported `skipped: true`). */
  readonly acceptedTokens: number
  /** Candidate tokens fed for verification (tree nodes other than the root). */
  readonly candidateTokens: number
  /** `acceptedHistogram[k]`: verification rows that accepted exactly `k` candidates. */
  readonly acceptedHistogram: readonly number[]
  /**
   * Per head (index `h` proposes the token `h + 2` ahead): `proposed` counts verification rows whose
   * tree reached depth `h + 1`, `accepted` those whose accepted path reached it.
   */
  readonly heads: readonly { readonly proposed: number; readonly accepted: number }[]
  /** Decode rows of requests with a speculator that ran without a tree (switched off, no draft yet, no room). */
  readonly plainSteps: number
}

/** Mutable accumulator behind `SpeculationStats`. */
export class SpeculationCounters {
  private verifySteps = 0
  private emitted = 0
  private accepted = 0
  private candidates = 0
  private plain = 0
  private readonly histogram: number[] = []
  private readonly proposedPerHead: number[] = []
  private readonly acceptedPerHead: number[] = []

  /** One verification row: its tree reached `depth`, fed `candidates` candidates, accepted `accepted`. */
  recordVerify(depth: number, candidates: number, accepted: number, emitted: number): void {
    this.verifySteps++
    this.emitted += emitted
    this.accepted += accepted
    this.candidates += candidates
    while (this.histogram.length <= accepted) this.histogram.push(0)
    this.histogram[accepted]!++
    while (this.proposedPerHead.length < depth) {
      this.proposedPerHead.push(0)
      this.acceptedPerHead.push(0)
    }
    for (let h = 0; h < depth; h++) {
      this.proposedPerHead[h]!++
      if (accepted > h) this.acceptedPerHead[h]!++
    }
  }

  recordPlain(): void {
    this.plain++
  }

  snapshot(): SpeculationStats {
    return {
      verifySteps: this.verifySteps,
      emittedTokens: this.emitted,
      acceptedTokens: this.accepted,
      candidateTokens: this.candidates,
      acceptedHistogram: [...this.histogram],
      heads: this.proposedPerHead.map((proposed, h) => ({ proposed, accepted: this.acceptedPerHead[h]! })),
      plainSteps: this.plain,
    }
  }
}
