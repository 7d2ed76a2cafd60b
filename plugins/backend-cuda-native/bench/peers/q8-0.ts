/**
 * llama.cpp's `Q8_0` weight format: each run of 32 values along a row becomes one 34-byte block,
 * an IEEE half scale `d` then 32 int8 values `q`, with x ≈ d·q. Quantisation as ggml's reference
 * (and gguf-py) does it, in f32 arithmetic: d = max|x| / 127, q = roundf(x · (1/d)) with ties
 * away from zero (C `roundf`, not JavaScript's `Math.round`), q = 0 for an all-zero block; the
 * scale is rounded to half only when stored, after the q were computed with the f32 one.
 */
import { f32ToF16Bits } from '@loom/testkit'

export const Q8_0_BLOCK = 32
export const Q8_0_BLOCK_BYTES = 34

/** C `roundf`: round half away from zero. */
export function roundHalfAway(x: number): number {
  return x < 0 ? -Math.floor(-x + 0.5) : Math.floor(x + 0.5)
}

/** Quantise `values` (a row-major tensor whose rows are multiples of 32 long) to Q8_0 blocks. */
export function quantizeQ8_0(values: Float32Array): Uint8Array {
  if (values.length % Q8_0_BLOCK !== 0) throw new Error(`Q8_0 needs a multiple of 32 values, got ${values.length}`)
  const blocks = values.length / Q8_0_BLOCK
  const out = new Uint8Array(blocks * Q8_0_BLOCK_BYTES)
  const view = new DataView(out.buffer)
  const f = Math.fround
  for (let b = 0; b < blocks; b++) {
    const base = b * Q8_0_BLOCK
    let amax = 0
    for (let j = 0; j < Q8_0_BLOCK; j++) amax = Math.max(amax, Math.abs(values[base + j]!))
    // One f32 operation each: the f64 result rounded once equals the f32 operation's result.
    const d = f(amax / 127)
    const id = d !== 0 ? f(1 / d) : 0
    const o = b * Q8_0_BLOCK_BYTES
    view.setUint16(o, f32ToF16Bits(d), true)
    for (let j = 0; j < Q8_0_BLOCK; j++) view.setInt8(o + 2 + j, roundHalfAway(f(values[base + j]! * id)))
  }
  return out
}
