/**
 * The sampler's summation orders. Every sum that can decide a token is defined so that a GPU can
 * compute it in parallel and still get the JS's bits (the device samplers are held to this
 * sampler token for token):
 * - f64 sums of arbitrary terms (the softmax's Σ, typical-p's entropy) are blocked: chunks of
 *   `SUM_CHUNK` consecutive terms are each summed left to right, and the chunk sums are added left
 *   to right. A GPU sums the chunks in parallel and only walks the chunk sums in order (~500 for a
 *   128k vocabulary) instead of every term;
 * - probability masses (top-p's and typical-p's cut, the draw's inverse CDF) are integers: a
 *   probability counts `massUnits(p) = floor(p · 2^52)`. Integer-valued doubles below 2^53 add
 *   exactly, so these sums do not depend on their order at all (a GPU may use atomics, scans or
 *   any tree), and they never exceed 2^53 (probabilities sum to about 1).
 */

/** Terms per chunk of `blockedSum`. */
export const SUM_CHUNK = 256

/** `p` (a probability, 0 <= p <= 1) in units of 2^-52: an exact integer, order-free to add. */
export const MASS_SCALE = 2 ** 52
export function massUnits(p: number): number {
  return Math.floor(p * MASS_SCALE)
}

/** Σ term(i) for i < n in the blocked order above. */
export function blockedSum(n: number, term: (i: number) => number): number {
  let total = 0
  for (let c = 0; c < n; c += SUM_CHUNK) {
    const end = Math.min(n, c + SUM_CHUNK)
    let chunk = 0
    for (let i = c; i < end; i++) chunk += term(i)
    total += chunk
  }
  return total
}
