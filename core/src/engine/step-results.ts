import type { GeneratedToken } from '../contracts/backend.ts'
import type { StepBatch, StepOutput } from '../contracts/step-runner.ts'
import type { PlannedRow } from './row-builder.ts'

/** Where one row's results start in a `StepOutput`'s arrays. */
export interface RowOffsets {
  /** First of its sampled positions in `tokens` (and `logprobs`, and rows of `topIds`). */
  readonly sampled: number
  /** First of its scored targets in `scores`. */
  readonly score: number
  /** First of its heads' ids in `draftIds`. */
  readonly draft: number
}

/**
 * A step's output, checked against what the step asked for (a runner that returns the wrong
 * number of anything fails the step's rows rather than misattributing tokens), with each row's
 * offsets and the tokens as the engine reports them.
 */
export class StepResults {
  readonly output: StepOutput
  readonly draftTopK: number
  private readonly topWidth: number
  private readonly offsets: readonly RowOffsets[]

  private constructor(output: StepOutput, batch: StepBatch, offsets: readonly RowOffsets[]) {
    this.output = output
    this.draftTopK = batch.draftTopK
    this.topWidth = batch.topLogprobs
    this.offsets = offsets
  }

  /** The results, or what is wrong with them (for the error that fails the step's rows). */
  static check(rows: readonly PlannedRow[], output: StepOutput, batch: StepBatch): StepResults | string {
    const offsets: RowOffsets[] = []
    let sampled = 0
    let score = 0
    let draft = 0
    for (const { row } of rows) {
      offsets.push({ sampled, score, draft })
      if (row.sampling !== null) sampled += row.treeMask !== undefined ? row.tokens.length : 1
      for (const target of row.scoreTargets) if (target >= 0) score++
      if (row.medusaSlot >= 0) draft += row.medusaHeads * batch.draftTopK
    }
    const counts: [string, number, number][] = [
      ['tokens', output.tokens.length, sampled],
      ['logprobs', output.logprobs.length, sampled],
      ['topIds', output.topIds.length, sampled * batch.topLogprobs],
      ['topLogprobs', output.topLogprobs.length, sampled * batch.topLogprobs],
      ['scores', output.scores.length, score],
      ['walkEnds', output.walkEnds.length, rows.length],
      ['draftIds', output.draftIds.length, draft],
    ]
    for (const [name, got, want] of counts) if (got !== want) return `${got} ${name}; expected ${want}`
    return new StepResults(output, batch, offsets)
  }

  rowAt(index: number): RowOffsets {
    return this.offsets[index]!
  }

  /** The token sampled at position `at` with its first `top` top logprobs, or null (no token allowed). */
  token(at: number, top: number): GeneratedToken | null {
    const { tokens, logprobs, topIds, topLogprobs } = this.output
    const id = tokens[at]!
    if (id < 0) return null
    const logprob = logprobs[at]!
    if (top <= 0) return { id, logprob, skipped: false }
    const alternatives: { id: number; logprob: number }[] = []
    for (let j = 0; j < Math.min(top, this.topWidth); j++) {
      const alt = topIds[at * this.topWidth + j]!
      if (alt < 0) break
      alternatives.push({ id: alt, logprob: topLogprobs[at * this.topWidth + j]! })
    }
    return { id, logprob, skipped: false, top: alternatives }
  }
}
