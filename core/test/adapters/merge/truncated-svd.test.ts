import t, { type Test } from 'tap'
import { SeededRandom } from '@loom/testkit'
import { lowRankFactors, thinSvd, truncatedSvd } from '../../../src/adapters/merge/truncated-svd.ts'

const random = new SeededRandom(3)

function matrix(rows: number, cols: number): Float64Array {
  return Float64Array.from(random.normalArray(rows * cols, 1))
}

/** Row-major `B [rows, k] · A [k, cols]`. */
function product(b: ArrayLike<number>, a: ArrayLike<number>, rows: number, k: number, cols: number): Float64Array {
  const out = new Float64Array(rows * cols)
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) {
      let s = 0
      for (let j = 0; j < k; j++) s += b[r * k + j]! * a[j * cols + c]!
      out[r * cols + c] = s
    }
  return out
}

const frob2 = (m: ArrayLike<number>) => Array.from(m).reduce((s, x) => s + x * x, 0)
const diff2 = (x: ArrayLike<number>, y: ArrayLike<number>) => Array.from(x).reduce((s, v, i) => s + (v - y[i]!) ** 2, 0)
const dotv = (x: Float64Array, y: Float64Array) => x.reduce((s, v, i) => s + v * y[i]!, 0)

function checkSvd(t: Test, m: Float64Array, rows: number, cols: number) {
  const svd = thinSvd(m, rows, cols)
  const n = Math.min(rows, cols)
  t.equal(svd.s.length, n, 'min(rows, cols) singular values')
  for (let j = 1; j < n; j++) t.ok(svd.s[j - 1]! >= svd.s[j]!, `σ${j - 1} >= σ${j}`)
  let worstOrtho = 0
  let worstPair = 0
  for (let j = 0; j < n; j++) {
    for (let k = 0; k < n; k++) {
      const want = j === k ? 1 : 0
      worstOrtho = Math.max(
        worstOrtho,
        Math.abs(dotv(svd.u[j]!, svd.u[k]!) - want),
        Math.abs(dotv(svd.v[j]!, svd.v[k]!) - want),
      )
    }
    // Defining property: M v_j = σ_j u_j.
    for (let r = 0; r < rows; r++) {
      let mv = 0
      for (let c = 0; c < cols; c++) mv += m[r * cols + c]! * svd.v[j]![c]!
      worstPair = Math.max(worstPair, Math.abs(mv - svd.s[j]! * svd.u[j]![r]!))
    }
  }
  t.ok(worstOrtho < 1e-10, `U and V orthonormal (${worstOrtho})`)
  t.ok(worstPair < 1e-10, `M v = σ u (${worstPair})`)
  const energy = svd.s.reduce((s, x) => s + x * x, 0)
  t.ok(Math.abs(energy - frob2(m)) < 1e-9 * frob2(m), 'Σσ² = ‖M‖²_F')
}

t.test('exact thin SVD, tall and wide', async (t) => {
  checkSvd(t, matrix(7, 5), 7, 5)
  checkSvd(t, matrix(5, 7), 5, 7)
  checkSvd(t, matrix(16, 16), 16, 16)
})

t.test('a rank-2 matrix is factored exactly at rank 2', async (t) => {
  const rows = 9
  const cols = 6
  const m = product(matrix(rows, 2), matrix(2, cols), rows, 2, cols)
  const f = lowRankFactors(m, rows, cols, { maxRank: 5, seed: 0 })
  t.equal(f.rank, 2, 'numerically zero singular values are dropped')
  const back = product(f.b, f.a, rows, f.rank, cols)
  t.ok(diff2(back, m) < 1e-10 * frob2(m), 'B·A reconstructs M')
})

t.test('truncation keeps the best rank-k approximation (Eckart–Young)', async (t) => {
  const rows = 12
  const cols = 10
  const m = matrix(rows, cols)
  const full = thinSvd(m, rows, cols)
  for (const k of [1, 3, 6]) {
    const f = lowRankFactors(m, rows, cols, { maxRank: k, seed: 0 })
    t.equal(f.rank, k)
    const err = diff2(product(f.b, f.a, rows, k, cols), m)
    const tail = Array.from(full.s.slice(k)).reduce((s, x) => s + x * x, 0)
    // f32 factors: relative agreement to ~1e-6.
    t.ok(Math.abs(err - tail) <= 1e-5 * frob2(m), `rank ${k}: ‖M − BA‖² = Σ_{j>k} σ_j² (${err} vs ${tail})`)
  }
})

t.test('randomized range finder matches the exact SVD on a decaying spectrum', async (t) => {
  const rows = 120
  const cols = 90
  // M = Σ_j 2^{-j/2} u_j v_jᵀ with random orthonormal-ish factors.
  const u = matrix(rows, 40)
  const v = matrix(40, cols)
  for (let j = 0; j < 40; j++) for (let r = 0; r < rows; r++) u[r * 40 + j]! *= 2 ** (-j / 2)
  const m = product(u, v, rows, 40, cols)
  const exact = thinSvd(m, rows, cols)
  // Sketches of 16 and 17 columns (rank + 10): the passes over M take columns four at a time.
  for (const k of [6, 7]) {
    const fast = truncatedSvd(m, rows, cols, { maxRank: k, seed: 5 })
    t.ok(fast.s.length < Math.min(rows, cols), `rank ${k}: took the randomized path`)
    for (let j = 0; j < k; j++) {
      t.ok(Math.abs(fast.s[j]! - exact.s[j]!) <= 1e-6 * exact.s[0]!, `rank ${k}: σ${j}: ${fast.s[j]} vs ${exact.s[j]}`)
    }
    const f = lowRankFactors(m, rows, cols, { maxRank: k, seed: 5 })
    const err = diff2(product(f.b, f.a, rows, k, cols), m)
    const tail = Array.from(exact.s.slice(k)).reduce((s, x) => s + x * x, 0)
    t.ok(err <= tail * 1.001 + 1e-6 * frob2(m), `rank ${k}: near-optimal error (${err} vs optimal ${tail})`)
    t.same(lowRankFactors(m, rows, cols, { maxRank: k, seed: 5 }).a, f.a, `rank ${k}: deterministic for a seed`)
  }
})

t.test('the zero matrix has rank 0', async (t) => {
  t.equal(lowRankFactors(new Float64Array(12), 3, 4, { maxRank: 3, seed: 0 }).rank, 0)
})
