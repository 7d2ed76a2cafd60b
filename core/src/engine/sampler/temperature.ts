/**
 * Divide the candidates' logits by `temperature` (> 0); 1 is a no-op. The best logit is
 * subtracted first (softmax does not change under a shift): without it a tiny temperature
 * (1e-40 passes validation) overflows f32 to ±Infinity and the softmax turns to NaN, where the
 * limit is greedy decoding. Shifted, every logit is <= 0 and the best is exactly 0, so the
 * smallest temperatures approach argmax as they should.
 */
export function applyTemperature(work: Float32Array, ids: Int32Array, n: number, temperature: number): void {
  if (temperature === 1) return
  let max = -Infinity
  for (let i = 0; i < n; i++) max = Math.max(max, work[ids[i]!]!)
  const shift = Number.isFinite(max) ? max : 0
  for (let i = 0; i < n; i++) work[ids[i]!] = (work[ids[i]!]! - shift) / temperature
}
