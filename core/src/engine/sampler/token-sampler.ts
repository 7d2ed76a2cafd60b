import type { GeneratedToken } from '../../contracts/backend.ts'
import type { TokenConstraint } from '../../contracts/grammar.ts'
import { argmax, createWarpScratch, type WarpScratch } from './candidates.ts'
import { applyConstraintMask } from './grammar-mask.ts'
import { applyPenalties, penaltiesActive } from './penalties.ts'
import type { SamplingState } from './sampling-state.ts'
import { logSumExp, logSumExpBelow } from './softmax.ts'
import { topLogprobs } from './top-logprobs.ts'
import { warp } from './warp-chain.ts'

/** What one row needs to be sampled. */
export interface SampleInput {
  /** The step's logits; the row starts at `offset` and spans `vocabSize` values. Never modified. */
  readonly logits: Float32Array
  readonly offset: number
  /** The row's `log Σ exp(logits)` when the runner already computed it (see `StepOutput`). */
  readonly logNorm?: number
  /** The row's first maximum (-1: none above -Infinity) when the runner already found it. */
  readonly argmax?: number
  readonly state: SamplingState
  readonly constraint: TokenConstraint | null
  readonly eosTokenIds: readonly number[]
  readonly topLogprobs: number
}

/**
 * Why no token came out: the constraint terminated and the request has no eos token, or the
 * constraint allows no token at all.
 */
export type SampleOutcome =
  | { readonly kind: 'token'; readonly token: GeneratedToken }
  | { readonly kind: 'constraint_done' }
  | { readonly kind: 'no_token_allowed' }

/**
 * Chooses the next token of one row: penalties → grammar mask → greedy argmax (temperature 0) or
 * the warper chain and one draw from the request's own stream. The reported logprob is the raw
 * model's log-softmax (before penalties, mask, temperature and warpers). One instance per engine:
 * it owns vocabulary-sized scratch buffers and is not re-entrant (rows are sampled one at a time).
 */
export class TokenSampler {
  readonly vocabSize: number
  private readonly work: Float32Array
  private readonly mask: Uint32Array
  private readonly scratch: WarpScratch

  constructor(vocabSize: number) {
    this.vocabSize = vocabSize
    this.work = new Float32Array(vocabSize)
    this.mask = new Uint32Array(Math.ceil(vocabSize / 32))
    this.scratch = createWarpScratch(vocabSize)
  }

  sample(input: SampleInput): SampleOutcome {
    const { logits, offset, state, constraint } = input
    const V = this.vocabSize
    const sampling = state.sampling
    if (constraint === null && !penaltiesActive(sampling) && (sampling.temperature === 0 || sampling.topK === 1)) {
      // Plain greedy: the raw logits decide, so skip the working copy; the chosen logit is the
      // row's maximum, which the log-softmax needs anyway.
      const id = input.argmax ?? argmax(logits, offset, V)
      if (id < 0) return { kind: 'no_token_allowed' }
      state.record(id)
      return {
        kind: 'token',
        token: this.report(input, id, input.logNorm ?? logSumExpBelow(logits, offset, V, logits[offset + id]!)),
      }
    }
    const work = this.work
    work.set(logits.subarray(offset, offset + V))
    if (penaltiesActive(sampling)) applyPenalties(work, state, sampling)
    if (constraint !== null && !applyConstraintMask(work, constraint, input.eosTokenIds, this.mask)) {
      return { kind: 'constraint_done' }
    }

    let id: number
    if (sampling.temperature === 0 || sampling.topK === 1) {
      id = argmax(work)
    } else {
      const n = warp(work, this.scratch, sampling)
      id = n === 0 ? -1 : this.draw(n, state)
    }
    if (id < 0) return { kind: 'no_token_allowed' }

    if (constraint !== null && !constraint.isTerminated()) constraint.accept(id)
    state.record(id)

    return { kind: 'token', token: this.report(input, id, input.logNorm ?? logSumExp(logits, offset, V)) }
  }

  /** The reported token: its raw log-softmax (`logNorm` is the row's normaliser) and top logprobs. */
  private report(input: SampleInput, id: number, logNorm: number): GeneratedToken {
    const { logits, offset } = input
    const logprob = logits[offset + id]! - logNorm
    if (input.topLogprobs <= 0) return { id, logprob, skipped: false }
    const top = topLogprobs(logits, offset, this.vocabSize, logNorm, input.topLogprobs, this.scratch)
    return { id, logprob, skipped: false, top }
  }

  /** Inverse-CDF draw over the candidates in their current order, from the request's own stream. */
  private draw(n: number, state: SamplingState): number {
    const { ids, prob } = this.scratch
    const u = state.rng.nextFloat()
    let cumulative = 0
    for (let i = 0; i < n; i++) {
      cumulative += prob[ids[i]!]!
      if (u < cumulative) return ids[i]!
    }
    return ids[n - 1]!
  }
}
