/** Divide the candidates' logits by `temperature` (> 0); 1 is a no-op. */
export function applyTemperature(work: Float32Array, ids: Int32Array, n: number, temperature: number): void {
  if (temperature === 1) return
  for (let i = 0; i < n; i++) work[ids[i]!] = work[ids[i]!]! / temperature
}
