/**
 * Deterministic uniform numbers for DARE's random drop masks. Each (seed, input, layer, module)
 * gets its own stream, so a mask does not depend on the order modules are processed in, and the
 * same merge request always drops the same entries (the seed is part of the cache key).
 */

/** FNV-1a over the UTF-16 code units of `text`: a 32-bit stream id. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193) >>> 0
  }
  return h
}

/**
 * A mulberry32 generator for the stream named by `seed` and `parts`; each call returns a uniform
 * number in [0, 1) with 32 bits of resolution.
 */
export function seededUniform(seed: number, ...parts: readonly (string | number)[]): () => number {
  let state = fnv1a(`${seed}/${parts.join('/')}`)
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let z = state
    z = Math.imul(z ^ (z >>> 15), z | 1)
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61)
    return ((z ^ (z >>> 14)) >>> 0) / 4294967296
  }
}
