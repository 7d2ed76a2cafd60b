/**
 * The vocabulary of per-request adapter merging (LoRAX's `merged_adapters`): strategy and
 * sign-election names, their defaults, and the validated request shape. See ./README.md for the maths.
 */
import type { AdapterRef } from '../../contracts/adapter.ts'

/** How task tensors are combined; names and default (`linear`) as in LoRAX. */
export const MERGE_STRATEGIES = ['linear', 'ties', 'dare_linear', 'dare_ties'] as const
export type MergeStrategy = (typeof MERGE_STRATEGIES)[number]

/** How TIES elects each entry's sign; names and default (`total`) as in LoRAX. */
export const MAJORITY_SIGN_METHODS = ['total', 'frequency'] as const
export type MajoritySignMethod = (typeof MAJORITY_SIGN_METHODS)[number]

export const DEFAULT_MERGE_STRATEGY: MergeStrategy = 'linear'
export const DEFAULT_MAJORITY_SIGN_METHOD: MajoritySignMethod = 'total'
/** LoRAX's default; only `linear` can use it (the other strategies need a density above 0). */
export const DEFAULT_DENSITY = 0
/** Seed of DARE's random pruning when the request names none (a Loom extension field). */
export const DEFAULT_MERGE_SEED = 0

/** A validated `merged_adapters` request: which adapters, and how to combine them. */
export interface MergedAdaptersRequest {
  /** The adapters to merge, in request order, each on the request's `adapter_source`. */
  readonly inputs: readonly AdapterRef[]
  /** One weight per input. */
  readonly weights: readonly number[]
  readonly strategy: MergeStrategy
  /** Fraction of entries each input keeps before combining (ties, dare_*), in (0, 1]. */
  readonly density: number
  readonly majoritySignMethod: MajoritySignMethod
  /** Seed of DARE's random drop masks (part of the cache key). */
  readonly seed: number
}

/** Whether the strategy prunes (and so reads `density`). */
export const usesDensity = (strategy: MergeStrategy): boolean => strategy !== 'linear'
/** Whether the strategy elects signs (and so reads `majority_sign_method`). */
export const usesSignElection = (strategy: MergeStrategy): boolean => strategy === 'ties' || strategy === 'dare_ties'
/** Whether the strategy drops entries at random (and so reads the seed). */
export const usesRandomPruning = (strategy: MergeStrategy): boolean =>
  strategy === 'dare_linear' || strategy === 'dare_ties'
