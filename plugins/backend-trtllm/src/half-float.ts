/**
 * f32 → 16-bit float encoding for the tensors handed to TensorRT-LLM, which wants LoRA weights in
 * the engine's own dtype. Both round to nearest, ties to even (as PyTorch's `.to(dtype)`), so a
 * converted adapter holds the values TensorRT-LLM's own converter would have written.
 */

const scratch = new Float32Array(1)
const scratchBits = new Uint32Array(scratch.buffer)

/** The dtypes a TensorRT-LLM engine's LoRA weights can take (the engine's `dtype`). */
export type EngineDtype = 'float16' | 'bfloat16' | 'float32'

/** IEEE 754 binary16 bits of `value` (overflow → ±Inf, NaN stays NaN). */
export function toFloat16Bits(value: number): number {
  scratch[0] = value
  const bits = scratchBits[0]!
  const sign = (bits >>> 16) & 0x8000
  const exponent = (bits >>> 23) & 0xff
  const mantissa = bits & 0x7fffff
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa === 0 ? 0 : 0x200)
  // Re-bias the exponent from f32's 127 to f16's 15.
  const halfExponent = exponent - 112
  if (halfExponent >= 0x1f) return sign | 0x7c00
  if (halfExponent <= 0) {
    // A subnormal half: shift the full significand (implicit 1 included) into the 10-bit field.
    if (halfExponent < -10) return sign
    const significand = mantissa | 0x800000
    const shift = 14 - halfExponent
    return sign | roundShift(significand, shift)
  }
  // A carry out of the mantissa correctly bumps the exponent (up to Inf).
  return sign | ((halfExponent << 10) + roundShift(mantissa, 13))
}

/** bfloat16 bits of `value`: the top half of its f32 bits, rounded (NaN stays NaN). */
export function toBfloat16Bits(value: number): number {
  scratch[0] = value
  const bits = scratchBits[0]!
  if ((bits & 0x7fffffff) > 0x7f800000) return ((bits >>> 16) | 0x40) & 0xffff
  return roundShift(bits, 16) & 0xffff
}

/** `value >>> shift`, rounded to nearest with ties to even. */
function roundShift(value: number, shift: number): number {
  const kept = value >>> shift
  const rest = value - kept * 2 ** shift
  const half = 2 ** (shift - 1)
  return rest > half || (rest === half && (kept & 1) === 1) ? kept + 1 : kept
}

/** `values` in `dtype`: a fresh `Uint16Array` of bits for the 16-bit types, a `Float32Array` otherwise. */
export function encodeFloats(values: Float32Array, dtype: EngineDtype): Float32Array | Uint16Array {
  if (dtype === 'float32') return values
  const encode = dtype === 'float16' ? toFloat16Bits : toBfloat16Bits
  const out = new Uint16Array(values.length)
  for (let i = 0; i < values.length; i++) out[i] = encode(values[i]!)
  return out
}
