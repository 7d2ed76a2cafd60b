/**
 * Direct, deliberately naive transcriptions of the merge formulas (PEFT `merge_utils`,
 * TIES-Merging, Yadav et al. 2023; DARE, Yu et al. 2023), written independently of
 * core/src/adapters/merge so the tests compare two implementations.
 */
const sign = (x: number) => (x > 0 ? 1 : x < 0 ? -1 : 0)

/** Keep the ⌊d·n⌋ largest |x| (stable: lower index first among equals). */
export function refTrim(x: number[], d: number): number[] {
  if (d >= 1) return [...x]
  const k = Math.floor(d * x.length)
  const order = x.map((v, i) => ({ v: Math.abs(v), i })).sort((a, b) => b.v - a.v || a.i - b.i)
  const keep = new Set(order.slice(0, k).map((o) => o.i))
  return x.map((v, i) => (keep.has(i) ? v : 0))
}

/** Drop with probability 1 − d (u ≥ d drops), rescale survivors by 1/d. */
export function refDrop(x: number[], d: number, u: () => number): number[] {
  if (d >= 1) return [...x]
  return x.map((v) => (u() < d ? v / d : 0))
}

/** Elect, then average the weighted entries that agree. */
export function refDisjoint(taus: number[][], w: number[], method: 'total' | 'frequency'): number[] {
  return taus[0]!.map((_, j) => {
    const votes = taus.reduce((s, tau) => s + (method === 'total' ? tau[j]! : sign(tau[j]!)), 0)
    const elected = votes >= 0 ? 1 : -1
    let sum = 0
    let count = 0
    taus.forEach((tau, i) => {
      if (sign(tau[j]!) === elected) {
        sum += w[i]! * tau[j]!
        count++
      }
    })
    return sum / Math.max(1, count)
  })
}

export const refLinear = (xs: number[][], w: number[]) =>
  xs[0]!.map((_, j) => xs.reduce((s, x, i) => s + w[i]! * x[j]!, 0))

/** One strategy on dense task tensors; `u(i)` is input i's uniform stream (DARE). */
export function refMerge(
  xs: number[][],
  w: number[],
  strategy: 'linear' | 'ties' | 'dare_linear' | 'dare_ties',
  d: number,
  method: 'total' | 'frequency',
  u: (i: number) => () => number,
): number[] {
  if (strategy === 'linear') return refLinear(xs, w)
  if (strategy === 'ties')
    return refDisjoint(
      xs.map((x) => refTrim(x, d)),
      w,
      method,
    )
  const dropped = xs.map((x, i) => refDrop(x, d, u(i)))
  return strategy === 'dare_linear' ? refLinear(dropped, w) : refDisjoint(dropped, w, method)
}

/** `s · B · A` for row-major `B [rows, r]`, `A [r, cols]`. */
export function refDelta(
  m: { rank: number; scale: number; a: ArrayLike<number>; b: ArrayLike<number> },
  rows: number,
  cols: number,
): number[] {
  const out: number[] = []
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < cols; j++) {
      let s = 0
      for (let k = 0; k < m.rank; k++) s += m.b[i * m.rank + k]! * m.a[k * cols + j]!
      out.push(m.scale * s)
    }
  return out
}
