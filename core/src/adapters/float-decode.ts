/**
 * Decoding of the 16-bit float formats adapters are stored in (IEEE half, bfloat16) to f32.
 */

let halfTable: Float32Array | null = null

/** All 65536 half values as f32, built on first use (256 KiB) so decoding is one lookup each. */
function halfToFloatTable(): Float32Array {
  if (halfTable !== null) return halfTable
  const table = new Float32Array(65536)
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1
    const exp = (h >>> 10) & 0x1f
    const mant = h & 0x3ff
    table[h] =
      exp === 0
        ? sign * mant * 2 ** -24
        : exp === 0x1f
          ? mant === 0
            ? sign * Infinity
            : NaN
          : sign * (1 + mant / 1024) * 2 ** (exp - 15)
  }
  halfTable = table
  return table
}

/** `count` little-endian halves starting at `bytes[0]` → f32. */
export function decodeF16(bytes: Uint8Array, count: number): Float32Array {
  const table = halfToFloatTable()
  const out = new Float32Array(count)
  for (let i = 0; i < count; i++) out[i] = table[bytes[2 * i]! | (bytes[2 * i + 1]! << 8)]!
  return out
}

/** `count` little-endian bfloat16s → f32 (a bfloat16 is the top half of an f32). */
export function decodeBf16(bytes: Uint8Array, count: number): Float32Array {
  const bits = new Uint32Array(count)
  for (let i = 0; i < count; i++) bits[i] = ((bytes[2 * i]! | (bytes[2 * i + 1]! << 8)) << 16) >>> 0
  return new Float32Array(bits.buffer)
}

/** `count` little-endian f32s → a fresh (aligned) Float32Array. */
export function decodeF32(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count)
  const view = new DataView(bytes.buffer, bytes.byteOffset, count * 4)
  for (let i = 0; i < count; i++) out[i] = view.getFloat32(4 * i, true)
  return out
}

/** `count` little-endian f64s → f32 (rounded). */
export function decodeF64(bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count)
  const view = new DataView(bytes.buffer, bytes.byteOffset, count * 8)
  for (let i = 0; i < count; i++) out[i] = view.getFloat64(8 * i, true)
  return out
}
