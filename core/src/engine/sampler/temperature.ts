/**
 * Below this temperature a logit divided by it can overflow f32 (|logit| / T > 3.4e38 needs
 * |logit| > 3.4e18 here): only then is the best logit subtracted first.
 */
const OVERFLOW_TEMPERATURE = 1e-20

/**
 * Divide the candidates' logits by `temperature` (> 0); 1 is a no-op. A vanishing temperature
 * (1e-40 passes validation) would overflow f32 to ±Infinity and turn the softmax to NaN, where
 * the limit is greedy decoding: there the best logit is subtracted first (softmax does not change
 * under a shift), so every logit is <= 0, the best is exactly 0, and sampling tends to argmax.
 * Ordinary temperatures skip that extra pass over the candidates (this runs for every sampled
 * token).
 */
export function applyTemperature(work: Float32Array, ids: Int32Array, n: number, temperature: number): void {
  if (temperature === 1) return
  let shift = 0
  if (temperature < OVERFLOW_TEMPERATURE) {
    let max = -Infinity
    for (let i = 0; i < n; i++) max = Math.max(max, work[ids[i]!]!)
    if (Number.isFinite(max)) shift = max
  }
  for (let i = 0; i < n; i++) work[ids[i]!] = (work[ids[i]!]! - shift) / temperature
}
