import type { GeneratedToken } from '../../contracts/backend.ts'
import type { RowSampling, StepBatch, StepOutput, StepRow } from '../../contracts/step-runner.ts'
import { topK } from '../medusa/draft.ts'
import type { PenaltyHistory } from './penalties.ts'
import { Xoshiro128StarStar } from './rng.ts'
import { logSumExp } from './softmax.ts'
import { TokenSampler } from './token-sampler.ts'

/** One `[vocabSize]` (or `[heads, vocabSize]`) logits block inside a larger array. */
export interface LogitsView {
  readonly data: Float32Array
  readonly offset: number
}

/** Where a JS runner's logits are; called only for the positions the step samples, scores or drafts at. */
export interface HostLogits {
  /** The next-token logits after position `position` of row `row` (batch order). */
  logits(row: number, position: number): LogitsView
  /** The row's Medusa heads' logits at `position`: `[h, vocabSize]` for at least its first `h = medusaHeads` heads. */
  heads(row: number, position: number): LogitsView
}

/** Streams kept between steps (LRU): a decoding row would otherwise replay its whole stream every step. */
const MAX_STREAMS = 4096

/**
 * The runner side of the step contract in JS, for a runner that has logits on the host (the
 * engine's test runners; a JS model): samples every `RowSampling` position with the engine's
 * `TokenSampler` (the reference the device samplers are held to), walks verification rows, scores
 * prompt targets and takes each head's best ids. One instance per runner: it owns vocabulary-sized
 * scratch and each sequence's random stream between steps.
 */
export class HostStepSampler {
  readonly vocabSize: number
  private readonly sampler: TokenSampler
  private readonly streams = new Map<number, { seed: bigint; draws: number; rng: Xoshiro128StarStar }>()

  constructor(vocabSize: number) {
    this.vocabSize = vocabSize
    this.sampler = new TokenSampler(vocabSize)
  }

  /** Everything `StepOutput` holds for `batch`, from the runner's logits. */
  sample(batch: StepBatch, source: HostLogits): StepOutput {
    const V = this.vocabSize
    const K = batch.draftTopK
    let sampled = 0
    let scored = 0
    let drafts = 0
    for (const row of batch.rows) {
      if (row.sampling !== null) sampled += row.treeMask !== undefined ? row.tokens.length : 1
      for (const target of row.scoreTargets) if (target >= 0) scored++
      if (row.medusaSlot >= 0) drafts += row.medusaHeads * K
    }
    const width = batch.topLogprobs
    const out = {
      tokens: new Int32Array(sampled),
      logprobs: new Float32Array(sampled),
      topIds: new Int32Array(sampled * width).fill(-1),
      topLogprobs: new Float32Array(sampled * width),
      scores: new Float32Array(scored),
      walkEnds: new Int32Array(batch.rows.length).fill(-1),
      draftIds: new Int32Array(drafts).fill(-1),
    }
    let s = 0
    let c = 0
    let d = 0
    batch.rows.forEach((row, r) => {
      row.scoreTargets.forEach((target, i) => {
        if (target < 0) return
        const { data, offset } = source.logits(r, i)
        out.scores[c++] = data[offset + target]! - logSumExp(data, offset, V)
      })
      const sampling = row.sampling
      if (sampling === null) return
      const n = row.tokens.length
      const tree = row.treeMask !== undefined
      const positions = tree ? n : 1
      const parents = tree ? parentsOf(row.treeMask!, n) : null
      const base = this.stream(row.seqId, sampling)
      for (let p = 0; p < positions; p++) {
        const position = tree ? p : n - 1
        const path = parents === null ? [] : pathTokens(row, parents, p)
        const rng = base.clone()
        for (let k = 0; k < path.length * drawsPerToken(sampling); k++) rng.nextFloat()
        const { data, offset } = source.logits(r, position)
        const token = this.sampler.choose({
          logits: data,
          offset,
          params: sampling.params,
          history: historyOf(sampling.penalties, path),
          allowed: sampling.allowed,
          allowedOffset: p * Math.ceil(V / 32),
          terminated: sampling.terminated?.[p] === 1,
          nextFloat: () => rng.nextFloat(),
          topLogprobs: sampling.topLogprobs,
        })
        write(out, s + p, width, token)
      }
      let end = n - 1
      if (parents !== null) {
        end = 0
        for (;;) {
          const chosen = out.tokens[s + end]!
          let next = -1
          for (let child = end + 1; child < n && next < 0; child++)
            if (parents[child] === end && row.tokens[child] === chosen) next = child
          if (next < 0) break
          end = next
        }
        out.walkEnds[r] = end
      }
      s += positions
      if (row.medusaSlot < 0) return
      const heads = source.heads(r, end)
      for (let h = 0; h < row.medusaHeads; h++) {
        out.draftIds.set(topK(heads.data, heads.offset + h * V, V, K), d)
        d += K
      }
    })
    return out
  }

  /** The row's stream after `sampling.draws` draws (kept per sequence between steps). */
  private stream(seqId: number, sampling: RowSampling): Xoshiro128StarStar {
    const { seed } = sampling.params
    let entry = this.streams.get(seqId)
    if (entry === undefined || entry.seed !== seed || entry.draws > sampling.draws) {
      entry = { seed, draws: 0, rng: new Xoshiro128StarStar(seed) }
    }
    for (; entry.draws < sampling.draws; entry.draws++) entry.rng.nextFloat()
    this.streams.delete(seqId)
    this.streams.set(seqId, entry)
    if (this.streams.size > MAX_STREAMS) this.streams.delete(this.streams.keys().next().value!)
    return entry.rng
  }
}

function drawsPerToken(sampling: RowSampling): number {
  return sampling.params.temperature > 0 && sampling.params.topK !== 1 ? 1 : 0
}

/** Each node's parent in a verification row: its nearest ancestor in the mask (-1 for the root). */
export function parentsOf(mask: Uint8Array, n: number): Int32Array {
  const parents = new Int32Array(n).fill(-1)
  for (let i = 1; i < n; i++) for (let j = i - 1; j >= 0 && parents[i]! < 0; j--) if (mask[i * n + j]) parents[i] = j
  return parents
}

/** The tokens a walk emits before it reaches node `node`: those of the path's nodes below the root, in order. */
function pathTokens(row: StepRow, parents: Int32Array, node: number): number[] {
  const path: number[] = []
  for (let j = node; j > 0; j = parents[j]!) path.push(row.tokens[j]!)
  return path.reverse()
}

/** `RowSampling.penalties` plus one output occurrence of each path token, as the penalties read it. */
function historyOf(pairs: Int32Array, path: readonly number[]): PenaltyHistory {
  const seen = new Set<number>()
  const outputCounts = new Map<number, number>()
  for (let i = 0; i < pairs.length; i += 2) {
    seen.add(pairs[i]!)
    if (pairs[i + 1]! > 0) outputCounts.set(pairs[i]!, pairs[i + 1]!)
  }
  for (const id of path) {
    seen.add(id)
    outputCounts.set(id, (outputCounts.get(id) ?? 0) + 1)
  }
  return { seen, outputCounts }
}

function write(
  out: { tokens: Int32Array; logprobs: Float32Array; topIds: Int32Array; topLogprobs: Float32Array },
  at: number,
  width: number,
  token: GeneratedToken | null,
): void {
  out.tokens[at] = token?.id ?? -1
  out.logprobs[at] = token?.logprob ?? 0
  token?.top?.slice(0, width).forEach((top, j) => {
    out.topIds[at * width + j] = top.id
    out.topLogprobs[at * width + j] = top.logprob
  })
}
