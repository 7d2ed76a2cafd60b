/**
 * Test helpers: drive a NativeStepRunner like the engine does (block tables, cache lengths) and
 * compare what it returns (sampled tokens and their top logprobs, never logits: see `StepOutput`)
 * with the float64 reference of @loom/testkit.
 */
import { GREEDY_ROW_SAMPLING, type LoraWeights, type RowSampling, type StepOutput, type StepRow } from '@loom/core'
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, type ReferenceLora } from '@loom/testkit'

/** Largest |x - ref| over the largest |ref|: the relative error of a logits vector. */
export function relError(x: ArrayLike<number>, ref: ArrayLike<number>): number {
  let err = 0
  let mag = 0
  for (let i = 0; i < ref.length; i++) {
    err = Math.max(err, Math.abs(x[i]! - ref[i]!))
    mag = Math.max(mag, Math.abs(ref[i]!))
  }
  return err / (mag || 1)
}

/** A sequence's view of the paged cache: blocks handed out by a shared counter. */
export class TestSequence {
  cacheLen = 0
  readonly blocks: number[] = []
  constructor(
    readonly seqId: number,
    private readonly blockSize: number,
    private readonly alloc: () => number,
    readonly loraSlot = -1,
  ) {}

  /**
   * A row feeding `tokens` (positions continue the cache), sampled greedily with the top
   * `TOP_LOGPROBS` logprobs at the last token, or at every token (`allLogits`: a causal tree mask
   * makes the row a verification row, sampled at every node), with the first `medusaHeads` (default 1)
   * heads of `medusaSlot` where it samples.
   */
  row(
    tokens: number[],
    opts: { allLogits?: boolean; medusaSlot?: number; medusaHeads?: number; sampling?: RowSampling } = {},
  ): StepRow {
    const n = tokens.length
    while (this.blocks.length * this.blockSize < this.cacheLen + n) this.blocks.push(this.alloc())
    const row: StepRow = {
      seqId: this.seqId,
      tokens: Int32Array.from(tokens),
      positions: Int32Array.from(tokens, (_, i) => this.cacheLen + i),
      cacheLen: this.cacheLen,
      blockTable: Int32Array.from(this.blocks),
      loraSlot: this.loraSlot,
      ...(opts.allLogits ? { treeMask: causalMask(n) } : {}),
      sampling: opts.sampling ?? GREEDY_TOP,
      scoreTargets: new Int32Array(0),
      medusaSlot: opts.medusaSlot ?? -1,
      medusaHeads: opts.medusaSlot === undefined ? 0 : (opts.medusaHeads ?? 1),
    }
    this.cacheLen += n
    return row
  }
}

/** Hands out block ids in a scrambled order so block tables are not the identity. */
export function blockAllocator(count: number): () => number {
  const ids = Array.from({ length: count }, (_, i) => (i * 7919) % count)
  let next = 0
  return () => {
    if (next >= ids.length) throw new Error('test ran out of KV blocks')
    return ids[next++]!
  }
}

/** The testkit's f64 adapter as the contract's f32 LoraWeights. */
export function toLoraWeights(lora: ReferenceLora, key: string): LoraWeights {
  return {
    kind: 'lora',
    key,
    layers: lora.layers.map((layer) =>
      Object.fromEntries(
        Object.entries(layer).map(([m, w]) => [
          m,
          { rank: w.rank, scale: w.scale, a: Float32Array.from(w.a), b: Float32Array.from(w.b) },
        ]),
      ),
    ),
  }
}

/**
 * The adapter as a 16-bit model's slot pool stores it: A and B rounded (f64 -> f32 -> bf16/f16,
 * as the runner's f32 copy is then converted natively), so the f64 reference sees the same values.
 */
export function roundLora(lora: ReferenceLora, dtype: 'bfloat16' | 'float16'): ReferenceLora {
  const round = (v: number): number =>
    dtype === 'bfloat16' ? bf16BitsToF32(f32ToBf16Bits(Math.fround(v))) : f16BitsToF32(f32ToF16Bits(Math.fround(v)))
  return {
    dir: lora.dir,
    layers: lora.layers.map((layer) =>
      Object.fromEntries(Object.entries(layer).map(([m, w]) => [m, { ...w, a: w.a.map(round), b: w.b.map(round) }])),
    ),
  }
}

/** Top logprobs every helper row asks for (the contract's most). */
export const TOP_LOGPROBS = 20

/** Greedy sampling reporting `TOP_LOGPROBS` top logprobs. */
export const GREEDY_TOP: RowSampling = { ...GREEDY_ROW_SAMPLING, topLogprobs: TOP_LOGPROBS }

/** `[n, n]` lower-triangular: a causal row written as a tree (a chain), so every node is sampled. */
export function causalMask(n: number): Uint8Array {
  const mask = new Uint8Array(n * n)
  for (let i = 0; i < n; i++) mask.fill(1, i * n, i * n + i + 1)
  return mask
}

/** A batch of helper rows: top logprobs as wide as they ask, one draft id per head. */
export function batchOf(
  rows: StepRow[],
  draftTopK = 1,
): { rows: StepRow[]; kvCopies: []; topLogprobs: number; draftTopK: number } {
  return { rows, kvCopies: [], topLogprobs: TOP_LOGPROBS, draftTopK }
}

/** One sampled position of a step: its token, logprob and top logprobs (best first). */
export interface SampledPosition {
  readonly token: number
  readonly logprob: number
  readonly top: readonly { readonly id: number; readonly logprob: number }[]
}

/** The step's sampled positions in order (rows in batch order, every node of a tree row). */
export function sampledPositions(out: StepOutput, width = TOP_LOGPROBS): SampledPosition[] {
  return Array.from(out.tokens, (token, i) => {
    const top: { id: number; logprob: number }[] = []
    for (let j = 0; j < width; j++) {
      const id = out.topIds[i * width + j]!
      if (id >= 0) top.push({ id, logprob: out.topLogprobs[i * width + j]! })
    }
    return { token, logprob: out.logprobs[i]!, top }
  })
}

/** The reference's raw log-softmax. */
export function logSoftmax(logits: ArrayLike<number>): Float64Array {
  let max = -Infinity
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]!)
  let sum = 0
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i]! - max)
  const lse = max + Math.log(sum)
  return Float64Array.from(logits, (x) => x - lse)
}

/**
 * `relError` on what a step returns: the largest |logprob - reference logprob| over the position's
 * top logprobs and its chosen token, over the reference's largest |logit| (the scale `relError`
 * uses for logits). The top ids must be the reference's best, up to near-ties: a top id whose
 * reference logprob is below the reference's `top.length`-th best by more than the error counts.
 */
export function relErrorTop(position: SampledPosition, ref: ArrayLike<number>): number {
  const lp = logSoftmax(ref)
  let mag = 0
  for (let i = 0; i < ref.length; i++) mag = Math.max(mag, Math.abs(ref[i]!))
  let err = Math.abs(position.logprob - lp[position.token]!)
  for (const { id, logprob } of position.top) err = Math.max(err, Math.abs(logprob - lp[id]!))
  // Best first: the k-th reported is at least the reference's k-th best, less the error.
  const sorted = Float64Array.from(lp).sort().reverse()
  position.top.forEach(({ id }, k) => (err = Math.max(err, sorted[k]! - lp[id]!)))
  return err / (mag || 1)
}

/**
 * `relErrorTop` between two runs of one greedy position (batched and alone, LoRA and merged
 * weights), on the scale of the reference logits `ref`: the largest |logprob difference| over the
 * chosen tokens and every top id both report; a top id only one run reports counts by how far it
 * sits above the other run's last reported logprob (a near-tie at the cut is no error); chosen
 * tokens that differ count by each one's logprob gap to the other run's choice (a near-tie).
 */
export function relErrorBetween(a: SampledPosition, b: SampledPosition, ref: ArrayLike<number>): number {
  let mag = 0
  for (let i = 0; i < ref.length; i++) mag = Math.max(mag, Math.abs(ref[i]!))
  if (a.top.length !== b.top.length) return Infinity
  const lpA = new Map(a.top.map(({ id, logprob }) => [id, logprob]))
  const lpB = new Map(b.top.map(({ id, logprob }) => [id, logprob]))
  let err = 0
  if (a.token === b.token) err = Math.abs(a.logprob - b.logprob)
  else
    err = Math.max(
      Math.abs(a.logprob - (lpB.get(a.token) ?? Infinity)),
      Math.abs(b.logprob - (lpA.get(b.token) ?? Infinity)),
    )
  for (const [mine, theirs, other] of [
    [a, lpB, b],
    [b, lpA, a],
  ] as const) {
    const last = other.top.at(-1)?.logprob ?? Infinity
    for (const { id, logprob } of mine.top) {
      const there = theirs.get(id)
      err = Math.max(err, there === undefined ? Math.max(0, logprob - last) : Math.abs(logprob - there))
    }
  }
  return err / (mag || 1)
}

/**
 * How far `ids` (best first) are from the reference's best ids, on `relError`'s scale: the
 * largest gap between the reference's k-th best logit and the logit of the k-th id (0 when they
 * are the best, in order, up to near-ties); Infinity for a repeated or out-of-range id.
 */
export function relErrorTopIds(ids: ArrayLike<number>, ref: ArrayLike<number>): number {
  let mag = 0
  for (let i = 0; i < ref.length; i++) mag = Math.max(mag, Math.abs(ref[i]!))
  const sorted = Float64Array.from(ref).sort().reverse()
  const seen = new Set<number>()
  let err = 0
  for (let k = 0; k < ids.length; k++) {
    const id = ids[k]!
    if (id < 0 || id >= ref.length || seen.has(id)) return Infinity
    seen.add(id)
    err = Math.max(err, sorted[k]! - ref[id]!)
  }
  return err / (mag || 1)
}
