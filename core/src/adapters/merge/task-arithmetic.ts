/**
 * Element-wise merging of task tensors (one dense update `ΔW_i` per input adapter, all the same
 * length), following PEFT's `merge_utils` / LoRAX's `utils/merges` definitions:
 *
 * - magnitude pruning keeps the `⌊density · n⌋` entries of largest `|x|` (TIES's trim step);
 * - random pruning keeps each entry with probability `density` and divides survivors by `density`
 *   (DARE's drop-and-rescale; LoRAX discards the rescale by accident, we apply it as the paper does);
 * - sign election: `total` takes the sign of `Σ_i τ_i`, `frequency` the sign of `Σ_i sign(τ_i)`,
 *   ties (a sum of 0) elect `+`; computed on the pruned tensors before weighting;
 * - disjoint merge: the mean of the weighted entries whose sign agrees with the elected one
 *   (`Σ_i w_i τ_i [sign τ_i = s] / max(1, #{i : sign τ_i = s})`); zeros never agree.
 *
 * Values are f32 in and out; sums are taken in f64.
 */
import { kthLargestValue } from '../../engine/sampler/kth-largest.ts'
import type { MajoritySignMethod, MergeStrategy } from './merge-params.ts'

/**
 * Keep the `⌊density · n⌋` entries of largest magnitude, zero the rest. Among equal magnitudes at
 * the threshold the lower index is kept (deterministic, unlike `torch.topk`). `density >= 1` keeps all.
 */
export function magnitudePrune(tensor: Float32Array, density: number): Float32Array {
  if (density >= 1) return tensor.slice()
  const n = tensor.length
  const k = Math.floor(density * n)
  const out = new Float32Array(n)
  if (k <= 0) return out
  const magnitudes = new Float32Array(n)
  for (let j = 0; j < n; j++) magnitudes[j] = Math.abs(tensor[j]!)
  const threshold = kthLargestValue(magnitudes, n, k)
  let above = 0
  for (let j = 0; j < n; j++) if (Math.abs(tensor[j]!) > threshold) above++
  let atThreshold = k - above
  for (let j = 0; j < n; j++) {
    const m = Math.abs(tensor[j]!)
    if (m > threshold) out[j] = tensor[j]!
    else if (m === threshold && atThreshold > 0) {
      out[j] = tensor[j]!
      atThreshold--
    }
  }
  return out
}

/**
 * DARE: keep each entry with probability `density` (drawn from `uniform`, entry by entry in
 * order) and rescale survivors by `1 / density`, so the expected tensor is unchanged.
 */
export function randomPrune(tensor: Float32Array, density: number, uniform: () => number): Float32Array {
  if (density >= 1) return tensor.slice()
  const out = new Float32Array(tensor.length)
  if (density <= 0) return out
  const scale = 1 / density
  for (let j = 0; j < tensor.length; j++) if (uniform() < density) out[j] = tensor[j]! * scale
  return out
}

/** The elected sign (+1 or -1) of every entry across `tensors`. */
export function electSigns(tensors: readonly Float32Array[], method: MajoritySignMethod): Int8Array {
  const n = tensors[0]!.length
  const signs = new Int8Array(n)
  for (let j = 0; j < n; j++) {
    let sum = 0
    for (const t of tensors) sum += method === 'total' ? t[j]! : Math.sign(t[j]!)
    signs[j] = sum >= 0 ? 1 : -1
  }
  return signs
}

/** Mean of the weighted entries that agree with the elected sign (0 where none does). */
export function disjointMerge(
  tensors: readonly Float32Array[],
  weights: readonly number[],
  signs: Int8Array,
): Float32Array {
  const n = signs.length
  const out = new Float32Array(n)
  for (let j = 0; j < n; j++) {
    let sum = 0
    let count = 0
    for (let i = 0; i < tensors.length; i++) {
      const v = tensors[i]![j]!
      if (Math.sign(v) === signs[j]) {
        sum += weights[i]! * v
        count++
      }
    }
    out[j] = sum / Math.max(1, count)
  }
  return out
}

/** `Σ_i w_i τ_i`. */
export function weightedSum(tensors: readonly Float32Array[], weights: readonly number[]): Float32Array {
  const n = tensors[0]!.length
  const out = new Float32Array(n)
  for (let j = 0; j < n; j++) {
    let sum = 0
    for (let i = 0; i < tensors.length; i++) sum += weights[i]! * tensors[i]![j]!
    out[j] = sum
  }
  return out
}

export interface TaskMergeOptions {
  readonly strategy: MergeStrategy
  readonly density: number
  readonly majoritySignMethod: MajoritySignMethod
  /** The uniform stream DARE uses for input `i` of this tensor. */
  readonly uniformFor: (input: number) => () => number
}

/** Merge equally shaped task tensors with one of the four strategies. */
export function mergeTaskTensors(
  tensors: readonly Float32Array[],
  weights: readonly number[],
  options: TaskMergeOptions,
): Float32Array {
  const { strategy, density, majoritySignMethod } = options
  switch (strategy) {
    case 'linear':
      return weightedSum(tensors, weights)
    case 'ties': {
      const trimmed = tensors.map((t) => magnitudePrune(t, density))
      return disjointMerge(trimmed, weights, electSigns(trimmed, majoritySignMethod))
    }
    case 'dare_linear':
      return weightedSum(
        tensors.map((t, i) => randomPrune(t, density, options.uniformFor(i))),
        weights,
      )
    case 'dare_ties': {
      const dropped = tensors.map((t, i) => randomPrune(t, density, options.uniformFor(i)))
      return disjointMerge(dropped, weights, electSigns(dropped, majoritySignMethod))
    }
  }
}
