/**
 * Conversions between f32 and the 16-bit float formats safetensors stores (IEEE half, bfloat16).
 * Encoding rounds to nearest, ties to even, like PyTorch's `.to(dtype)`.
 */

const f32 = new Float32Array(1)
const u32 = new Uint32Array(f32.buffer)

/** f32 → IEEE 754 half bits. */
export function f32ToF16Bits(value: number): number {
  f32[0] = value
  const x = u32[0]!
  const sign = (x >>> 16) & 0x8000
  const exp = (x >>> 23) & 0xff
  let mant = x & 0x7fffff
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0) // inf / nan
  let e = exp - 127 + 15
  if (e >= 0x1f) return sign | 0x7c00 // overflow → inf
  if (e <= 0) {
    // Subnormal half (or zero): shift the mantissa with its implicit bit, round to nearest even.
    if (e < -10) return sign
    mant |= 0x800000
    const shift = 14 - e
    const half = 1 << (shift - 1)
    const rest = mant & ((1 << shift) - 1)
    let m = mant >>> shift
    if (rest > half || (rest === half && (m & 1) === 1)) m++
    return sign | m
  }
  const rest = mant & 0x1fff
  let m = mant >>> 13
  if (rest > 0x1000 || (rest === 0x1000 && (m & 1) === 1)) {
    m++
    if (m === 0x400) {
      m = 0
      e++
      if (e >= 0x1f) return sign | 0x7c00
    }
  }
  return sign | (e << 10) | m
}

/** IEEE 754 half bits → number. */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1
  const exp = (h >>> 10) & 0x1f
  const mant = h & 0x3ff
  if (exp === 0) return sign * mant * 2 ** -24
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN
  return sign * (1 + mant / 1024) * 2 ** (exp - 15)
}

/** f32 → bfloat16 bits (upper half of the f32, rounded to nearest even). */
export function f32ToBf16Bits(value: number): number {
  f32[0] = value
  const x = u32[0]!
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff) !== 0) return ((x >>> 16) | 0x40) & 0xffff // keep NaN a NaN
  const rounded = x + 0x7fff + ((x >>> 16) & 1)
  return (rounded >>> 16) & 0xffff
}

/** bfloat16 bits → number. */
export function bf16BitsToF32(b: number): number {
  u32[0] = (b & 0xffff) << 16
  return f32[0]!
}
