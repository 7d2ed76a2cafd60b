/**
 * Test helpers: drive a NativeStepRunner like the engine does (block tables, cache lengths) and
 * compare its logits with the float64 reference of @loom/testkit.
 */
import type { LoraWeights, StepRow } from '@loom/core'
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

  /** A row feeding `tokens` (positions continue the cache), with logits for the last token or all. */
  row(tokens: number[], opts: { allLogits?: boolean; medusaSlot?: number; medusa?: number[] } = {}): StepRow {
    const n = tokens.length
    while (this.blocks.length * this.blockSize < this.cacheLen + n) this.blocks.push(this.alloc())
    const row: StepRow = {
      seqId: this.seqId,
      tokens: Int32Array.from(tokens),
      positions: Int32Array.from(tokens, (_, i) => this.cacheLen + i),
      cacheLen: this.cacheLen,
      blockTable: Int32Array.from(this.blocks),
      loraSlot: this.loraSlot,
      logitIndices: opts.allLogits ? Int32Array.from(tokens, (_, i) => i) : Int32Array.of(n - 1),
      medusaSlot: opts.medusaSlot ?? -1,
      medusaIndices: Int32Array.from(opts.medusa ?? []),
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
