import { MASS_SCALE, massUnits } from './blocked-sum.ts'
import { selectSmallest, sortRange } from './select.ts'

/** Below this many candidates the crossing is found by sorting (cheaper than more selection passes). */
const SORT_BELOW = 32

/**
 * Shared core of top-p and typical-p: keeps the shortest prefix of `ids[0, n)`, in (key, id) order
 * (select.ts), whose probability mass reaches `mass`. A token is kept while the mass of the tokens
 * before it is still below `mass` (Hugging Face's rule; at least one token is kept). Masses are
 * counted in `massUnits` (blocked-sum.ts), so the cut is a function of the keys and probabilities
 * alone, however the prefix is found. Returns the kept count; afterwards `ids[0, result)` are the
 * kept tokens in ascending id order, as the candidates were.
 *
 * Never sorts the vocabulary: quickselect brings growing chunks (64, 256, 1024, …) of the best
 * keys to the front; a chunk that does not reach the mass is kept whole, unsorted. The chunk where
 * the mass is crossed is bisected with further selections until at most `SORT_BELOW` ids remain,
 * which are sorted. Expected O(n), plus sorting the kept ids back into id order.
 */
export function massPrefix(ids: Int32Array, n: number, key: Float64Array, prob: Float64Array, mass: number): number {
  const kept = prefixLength(ids, n, key, prob, mass * MASS_SCALE)
  ids.subarray(0, kept).sort()
  return kept
}

function prefixLength(ids: Int32Array, n: number, key: Float64Array, prob: Float64Array, target: number): number {
  let lo = 0
  let cumulative = 0
  let chunk = 64
  while (lo < n) {
    const hi = Math.min(n, lo + chunk)
    selectSmallest(ids, lo, n, hi - lo, key)
    const chunkMass = massOf(ids, lo, hi, prob)
    if (cumulative + chunkMass < target && hi < n) {
      cumulative += chunkMass
      lo = hi
      chunk *= 4
      continue
    }
    return crossing(ids, lo, hi, key, prob, target, cumulative)
  }
  return n
}

/**
 * The cut inside `ids[lo, hi)`, whose ids all come after those before `lo`; `cumulative` is the
 * mass before `lo`, still below `target` (both in mass units). Returns the index of the first
 * dropped token, or `hi`.
 */
function crossing(
  ids: Int32Array,
  lo: number,
  hi: number,
  key: Float64Array,
  prob: Float64Array,
  target: number,
  cumulative: number,
): number {
  while (hi - lo > SORT_BELOW) {
    const mid = (lo + hi) >>> 1
    selectSmallest(ids, lo, hi, mid - lo, key)
    const half = massOf(ids, lo, mid, prob)
    // Mass before `mid` reaches the target: the cut is at or before `mid`.
    if (cumulative + half >= target) hi = mid
    else {
      cumulative += half
      lo = mid
    }
  }
  sortRange(ids, lo, hi, key)
  for (let i = lo; i < hi; i++) {
    if (i > 0 && cumulative >= target) return i
    cumulative += massUnits(prob[ids[i]!]!)
  }
  return hi
}

/** The mass of `ids[lo, hi)` in mass units: exact, so in any order. */
function massOf(ids: Int32Array, lo: number, hi: number, prob: Float64Array): number {
  let sum = 0
  for (let i = lo; i < hi; i++) sum += massUnits(prob[ids[i]!]!)
  return sum
}
