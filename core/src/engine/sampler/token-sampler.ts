import type { GeneratedToken } from '../../contracts/backend.ts'
import type { TokenConstraint } from '../../contracts/grammar.ts'
import type { SamplingParams } from '../../contracts/sampling.ts'
import { massUnits } from './blocked-sum.ts'
import { argmax, createWarpScratch, type WarpScratch } from './candidates.ts'
import { applyAllowedMask } from './grammar-mask.ts'
import { applyPenalties, penaltiesActive, type PenaltyHistory } from './penalties.ts'
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

/** `TokenSampler.choose`'s input: one logits row and its `RowSampling` as plain data. */
export interface ChooseInput {
  readonly logits: Float32Array
  readonly offset: number
  readonly params: SamplingParams
  readonly history: PenaltyHistory
  /** Allowed-token bitmask words (see `RowSampling.allowed`) from `allowedOffset`, or null. */
  readonly allowed: Uint32Array | null
  readonly allowedOffset: number
  /** The constraint terminated: an allowed token scored -Infinity becomes 0. */
  readonly terminated: boolean
  /** The request's stream, already past its earlier draws. */
  readonly nextFloat: () => number
  readonly topLogprobs: number
  readonly logNorm?: number
  readonly argmax?: number
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
    const { state, constraint } = input
    let allowed: Uint32Array | null = null
    let terminated = false
    if (constraint !== null) {
      if (constraint.isTerminated()) {
        if (input.eosTokenIds.length === 0) return { kind: 'constraint_done' }
        allowed = this.mask.fill(0)
        for (const id of input.eosTokenIds) if (id >= 0 && id < this.vocabSize) allowed[id >>> 5]! |= 1 << (id & 31)
        terminated = true
      } else if (constraint.fillNextTokenMask(this.mask.fill(0))) {
        allowed = this.mask
      }
    }
    const token = this.choose({
      logits: input.logits,
      offset: input.offset,
      params: state.sampling,
      history: state,
      allowed,
      allowedOffset: 0,
      terminated,
      nextFloat: () => {
        state.draws++
        return state.rng.nextFloat()
      },
      topLogprobs: input.topLogprobs,
      ...(input.logNorm !== undefined ? { logNorm: input.logNorm } : {}),
      ...(input.argmax !== undefined ? { argmax: input.argmax } : {}),
    })
    if (token === null) return { kind: 'no_token_allowed' }
    if (constraint !== null && !constraint.isTerminated()) constraint.accept(token.id)
    state.record(token.id)
    return { kind: 'token', token }
  }

  /**
   * The sampling rule itself, on plain data (what `RowSampling` carries to a runner): penalties →
   * mask → greedy argmax (temperature 0 or top-k 1) or the warper chain and one `nextFloat` draw.
   * Returns null when the mask and warpers leave no token. Records nothing.
   */
  choose(input: ChooseInput): GeneratedToken | null {
    const { logits, offset, params: sampling, allowed } = input
    const V = this.vocabSize
    const penalised = penaltiesActive(sampling)
    if (allowed === null && !penalised && (sampling.temperature === 0 || sampling.topK === 1)) {
      // Plain greedy: the raw logits decide, so skip the working copy; the chosen logit is the
      // row's maximum, which the log-softmax needs anyway.
      const id = input.argmax ?? argmax(logits, offset, V)
      if (id < 0) return null
      return this.report(input, id, input.logNorm ?? logSumExpBelow(logits, offset, V, logits[offset + id]!))
    }
    const work = this.work
    work.set(logits.subarray(offset, offset + V))
    if (penalised) applyPenalties(work, input.history, sampling)
    if (allowed !== null) applyAllowedMask(work, allowed, input.allowedOffset, input.terminated)

    let id: number
    if (sampling.temperature === 0 || sampling.topK === 1) {
      id = argmax(work)
    } else {
      const n = warp(work, this.scratch, sampling)
      id = n === 0 ? -1 : this.draw(n, input.nextFloat)
    }
    if (id < 0) return null
    return this.report(input, id, input.logNorm ?? logSumExp(logits, offset, V))
  }

  /** The reported token: its raw log-softmax (`logNorm` is the row's normaliser) and top logprobs. */
  private report(input: ChooseInput, id: number, logNorm: number): GeneratedToken {
    const { logits, offset } = input
    const logprob = logits[offset + id]! - logNorm
    if (input.topLogprobs <= 0) return { id, logprob, skipped: false }
    const top = topLogprobs(logits, offset, this.vocabSize, logNorm, input.topLogprobs, this.scratch)
    return { id, logprob, skipped: false, top }
  }

  /**
   * Inverse-CDF draw over the candidates in id order, from the request's own stream. The CDF is
   * in mass units (blocked-sum.ts): exact integers, so a GPU finds the same token with a parallel
   * scan. The first token whose cumulative mass passes `u` times the total is drawn.
   */
  private draw(n: number, nextFloat: () => number): number {
    const { ids, prob } = this.scratch
    const u = nextFloat()
    let total = 0
    for (let i = 0; i < n; i++) total += massUnits(prob[ids[i]!]!)
    const target = u * total
    let cumulative = 0
    for (let i = 0; i < n; i++) {
      cumulative += massUnits(prob[ids[i]!]!)
      if (cumulative > target) return ids[i]!
    }
    return ids[n - 1]!
  }
}
