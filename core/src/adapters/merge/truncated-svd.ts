/**
 * Re-factoring a dense update `M` (`[rows, cols]`, row-major) into LoRA factors `B·A ≈ M` with a
 * truncated SVD, in plain TypeScript:
 *
 * - exact thin SVD by one-sided (Hestenes) Jacobi rotations on the columns of `M` or `Mᵀ`, whichever
 *   has fewer columns; used when the wanted rank plus oversampling reaches `min(rows, cols)`;
 * - otherwise a seeded randomized range finder (Halko, Martinsson & Tropp 2011, Alg. 4.4): `Y = M Ω`
 *   with a few power iterations, `Q = orth(Y)`, an exact SVD of the small `Qᵀ M`, `U = Q Ũ`.
 *
 * The result keeps the singular values above `relativeTolerance · σ₁`, at most `maxRank` of them,
 * and splits each between the factors: `B = U √Σ`, `A = √Σ Vᵀ` (balanced magnitudes).
 */
import { seededUniform } from './seeded-random.ts'

/** A thin SVD: `M = Σ_j s[j] · u[j] v[j]ᵀ`, singular values descending; `u[j]`, `v[j]` unit columns. */
export interface ThinSvd {
  readonly s: Float64Array
  /** Left singular vectors, `rows` long each. */
  readonly u: readonly Float64Array[]
  /** Right singular vectors, `cols` long each. */
  readonly v: readonly Float64Array[]
}

/** LoRA factors of a dense update. */
export interface LowRankFactors {
  readonly rank: number
  /** `[rank, cols]`, row-major. */
  readonly a: Float32Array
  /** `[rows, rank]`, row-major. */
  readonly b: Float32Array
  /** Every singular value the decomposition computed (descending), kept or not. */
  readonly singularValues: Float64Array
}

const MAX_SWEEPS = 60

function dot(x: Float64Array, y: Float64Array): number {
  let sum = 0
  for (let i = 0; i < x.length; i++) sum += x[i]! * y[i]!
  return sum
}

/**
 * Orthogonalize the columns `g` (each `m` long) in place by Jacobi rotations and return the
 * accumulated rotation `V` (as columns): afterwards `g = G₀ V` with mutually orthogonal columns.
 */
function jacobiOrthogonalize(g: Float64Array[]): Float64Array[] {
  const n = g.length
  const v = Array.from({ length: n }, (_, j) => {
    const col = new Float64Array(n)
    col[j] = 1
    return col
  })
  for (let sweep = 0; sweep < MAX_SWEEPS; sweep++) {
    let rotated = false
    for (let p = 0; p < n - 1; p++) {
      for (let q = p + 1; q < n; q++) {
        const gp = g[p]!
        const gq = g[q]!
        const alpha = dot(gp, gp)
        const beta = dot(gq, gq)
        const gamma = dot(gp, gq)
        if (gamma === 0 || Math.abs(gamma) <= 1e-15 * Math.sqrt(alpha * beta)) continue
        rotated = true
        // The rotation that zeroes the (p, q) entry of GᵀG.
        const zeta = (beta - alpha) / (2 * gamma)
        const t = (zeta >= 0 ? 1 : -1) / (Math.abs(zeta) + Math.sqrt(1 + zeta * zeta))
        const c = 1 / Math.sqrt(1 + t * t)
        const s = c * t
        for (let i = 0; i < gp.length; i++) {
          const x = gp[i]!
          const y = gq[i]!
          gp[i] = c * x - s * y
          gq[i] = s * x + c * y
        }
        const vp = v[p]!
        const vq = v[q]!
        for (let i = 0; i < n; i++) {
          const x = vp[i]!
          const y = vq[i]!
          vp[i] = c * x - s * y
          vq[i] = s * x + c * y
        }
      }
    }
    if (!rotated) break
  }
  return v
}

/** Columns of a row-major `[rows, cols]` matrix, or of its transpose. */
function columnsOf(m: ArrayLike<number>, rows: number, cols: number, transpose: boolean): Float64Array[] {
  if (!transpose) {
    const out = Array.from({ length: cols }, () => new Float64Array(rows))
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c]![r] = m[r * cols + c]!
    return out
  }
  const out = Array.from({ length: rows }, () => new Float64Array(cols))
  for (let r = 0; r < rows; r++) {
    const col = out[r]!
    for (let c = 0; c < cols; c++) col[c] = m[r * cols + c]!
  }
  return out
}

/** Exact thin SVD of the row-major `[rows, cols]` matrix `m` (one-sided Jacobi). */
export function thinSvd(m: ArrayLike<number>, rows: number, cols: number): ThinSvd {
  // Rotate the columns of whichever of M, Mᵀ has fewer: G = M (cols ≤ rows) or G = Mᵀ.
  const transpose = cols > rows
  const g = columnsOf(m, rows, cols, transpose)
  const rot = jacobiOrthogonalize(g)
  const n = g.length
  const norms = g.map((col) => Math.sqrt(dot(col, col)))
  const order = Array.from({ length: n }, (_, j) => j).sort((x, y) => norms[y]! - norms[x]!)
  const s = new Float64Array(n)
  const left: Float64Array[] = []
  const right: Float64Array[] = []
  for (const [k, j] of order.entries()) {
    s[k] = norms[j]!
    // G V = U Σ: the rotated columns are σ_j u_j; V holds the other side's vectors.
    // For G = Mᵀ = U' Σ V'ᵀ we have M = V' Σ U'ᵀ: the roles swap.
    const unit = g[j]!.map((x) => (norms[j]! > 0 ? x / norms[j]! : 0))
    left.push(transpose ? rot[j]! : unit)
    right.push(transpose ? unit : rot[j]!)
  }
  return { s, u: left, v: right }
}

/** Orthonormalize columns in place (modified Gram–Schmidt, twice for stability); zero out dependent ones. */
function orthonormalize(cols: Float64Array[]): void {
  for (let j = 0; j < cols.length; j++) {
    const c = cols[j]!
    const initial = Math.sqrt(dot(c, c))
    for (let pass = 0; pass < 2; pass++) {
      for (let k = 0; k < j; k++) {
        const q = cols[k]!
        const r = dot(q, c)
        for (let i = 0; i < c.length; i++) c[i]! -= r * q[i]!
      }
    }
    const norm = Math.sqrt(dot(c, c))
    const keep = norm > 1e-12 * Math.max(initial, Number.MIN_VALUE)
    for (let i = 0; i < c.length; i++) c[i] = keep ? c[i]! / norm : 0
  }
}

/** `M X` for row-major `M` `[rows, cols]` and columns `X` (`cols` long each). */
function multiply(m: ArrayLike<number>, rows: number, cols: number, x: readonly Float64Array[]): Float64Array[] {
  const out = x.map(() => new Float64Array(rows))
  // Four columns of X per pass over a row of M: each element of M is read once per four dots
  // (the passes over M dominate a randomized SVD; this made them ~2x faster in V8).
  let j = 0
  for (; j + 4 <= x.length; j += 4) {
    const [x0, x1, x2, x3] = [x[j]!, x[j + 1]!, x[j + 2]!, x[j + 3]!]
    const [o0, o1, o2, o3] = [out[j]!, out[j + 1]!, out[j + 2]!, out[j + 3]!]
    for (let r = 0; r < rows; r++) {
      const base = r * cols
      let s0 = 0
      let s1 = 0
      let s2 = 0
      let s3 = 0
      for (let c = 0; c < cols; c++) {
        const v = m[base + c]!
        s0 += v * x0[c]!
        s1 += v * x1[c]!
        s2 += v * x2[c]!
        s3 += v * x3[c]!
      }
      o0[r] = s0
      o1[r] = s1
      o2[r] = s2
      o3[r] = s3
    }
  }
  for (; j < x.length; j++) {
    const xj = x[j]!
    const oj = out[j]!
    for (let r = 0; r < rows; r++) {
      const base = r * cols
      let sum = 0
      for (let c = 0; c < cols; c++) sum += m[base + c]! * xj[c]!
      oj[r] = sum
    }
  }
  return out
}

/** `Mᵀ Y` for row-major `M` `[rows, cols]` and columns `Y` (`rows` long each). */
function multiplyTransposed(
  m: ArrayLike<number>,
  rows: number,
  cols: number,
  y: readonly Float64Array[],
): Float64Array[] {
  const out = y.map(() => new Float64Array(cols))
  // Four columns of Y per pass over a row of M, as in `multiply`.
  let j = 0
  for (; j + 4 <= y.length; j += 4) {
    const [y0, y1, y2, y3] = [y[j]!, y[j + 1]!, y[j + 2]!, y[j + 3]!]
    const [o0, o1, o2, o3] = [out[j]!, out[j + 1]!, out[j + 2]!, out[j + 3]!]
    for (let r = 0; r < rows; r++) {
      const base = r * cols
      const w0 = y0[r]!
      const w1 = y1[r]!
      const w2 = y2[r]!
      const w3 = y3[r]!
      for (let c = 0; c < cols; c++) {
        const v = m[base + c]!
        o0[c]! += v * w0
        o1[c]! += v * w1
        o2[c]! += v * w2
        o3[c]! += v * w3
      }
    }
  }
  for (; j < y.length; j++) {
    const yj = y[j]!
    const oj = out[j]!
    for (let r = 0; r < rows; r++) {
      const w = yj[r]!
      if (w === 0) continue
      const base = r * cols
      for (let c = 0; c < cols; c++) oj[c]! += m[base + c]! * w
    }
  }
  return out
}

export interface LowRankOptions {
  /** Largest rank to keep. */
  readonly maxRank: number
  /** Seed of the randomized range finder (ignored on the exact path). */
  readonly seed: number
  /** Singular values at or below `relativeTolerance · σ₁` are dropped. Default 1e-6. */
  readonly relativeTolerance?: number
  /** Extra random directions of the range finder. Default 10. */
  readonly oversample?: number
  /** Power iterations of the range finder. Default 3. */
  readonly powerIterations?: number
}

/** Thin SVD of `m`, exact or (for large matrices and small ranks) randomized. */
export function truncatedSvd(m: ArrayLike<number>, rows: number, cols: number, options: LowRankOptions): ThinSvd {
  const sketch = options.maxRank + (options.oversample ?? 10)
  if (sketch >= Math.min(rows, cols)) return thinSvd(m, rows, cols)
  const uniform = seededUniform(options.seed, 'range-finder', rows, cols)
  const omega = Array.from({ length: sketch }, () => {
    const col = new Float64Array(cols)
    for (let i = 0; i < cols; i++) col[i] = 2 * uniform() - 1
    return col
  })
  let q = multiply(m, rows, cols, omega)
  orthonormalize(q)
  for (let it = 0; it < (options.powerIterations ?? 3); it++) {
    const z = multiplyTransposed(m, rows, cols, q)
    orthonormalize(z)
    q = multiply(m, rows, cols, z)
    orthonormalize(q)
  }
  // Small = Qᵀ M, [sketch, cols] row-major; its SVD Ũ Σ Vᵀ gives M ≈ (Q Ũ) Σ Vᵀ.
  const smallRows = multiplyTransposed(m, rows, cols, q)
  const small = new Float64Array(sketch * cols)
  smallRows.forEach((row, j) => small.set(row, j * cols))
  const inner = thinSvd(small, sketch, cols)
  const u = inner.u.map((ut) => {
    const col = new Float64Array(rows)
    for (let j = 0; j < sketch; j++) {
      const w = ut[j]!
      if (w === 0) continue
      const qj = q[j]!
      for (let i = 0; i < rows; i++) col[i]! += w * qj[i]!
    }
    return col
  })
  return { s: inner.s, u, v: inner.v }
}

/** Factor `m` (`[rows, cols]`) into `B [rows, k]`, `A [k, cols]` with `k ≤ maxRank`. */
export function lowRankFactors(
  m: ArrayLike<number>,
  rows: number,
  cols: number,
  options: LowRankOptions,
): LowRankFactors {
  const svd = truncatedSvd(m, rows, cols, options)
  const floor = (options.relativeTolerance ?? 1e-6) * (svd.s[0] ?? 0)
  let rank = 0
  while (rank < Math.min(options.maxRank, svd.s.length) && svd.s[rank]! > floor) rank++
  const a = new Float32Array(rank * cols)
  const b = new Float32Array(rows * rank)
  for (let k = 0; k < rank; k++) {
    const root = Math.sqrt(svd.s[k]!)
    const u = svd.u[k]!
    const v = svd.v[k]!
    for (let r = 0; r < rows; r++) b[r * rank + k] = u[r]! * root
    for (let c = 0; c < cols; c++) a[k * cols + c] = v[c]! * root
  }
  return { rank, a, b, singularValues: svd.s }
}
