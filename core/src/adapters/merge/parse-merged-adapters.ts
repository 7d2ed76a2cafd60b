/**
 * Validates the `merged_adapters` request field (native `parameters.merged_adapters`, and the v1
 * extension field of the same name). Shape and defaults follow LoRAX; every error names the
 * offending field under `path`.
 */
import { fieldError } from '../../errors/index.ts'
import {
  MAX_ADAPTER_ID_LENGTH,
  checkIdentifier,
  expectObject,
  optionalNumber,
  optionalString,
  rejectUnknownKeys,
} from '../../validation/fields.ts'
import {
  DEFAULT_DENSITY,
  DEFAULT_MAJORITY_SIGN_METHOD,
  DEFAULT_MERGE_SEED,
  DEFAULT_MERGE_STRATEGY,
  MAJORITY_SIGN_METHODS,
  MERGE_STRATEGIES,
  usesDensity,
  type MajoritySignMethod,
  type MergeStrategy,
  type MergedAdaptersRequest,
} from './merge-params.ts'

/** Inputs one request may merge: each is read and densified per module, so the cost grows with it. */
export const MAX_MERGED_ADAPTERS = 16

/** Largest weight magnitude a merge accepts. */
const MAX_MERGE_WEIGHT = 1e6

const FIELDS = new Set(['ids', 'weights', 'merge_strategy', 'density', 'majority_sign_method', 'seed'])

function oneOf<T extends string>(
  body: Record<string, unknown>,
  key: string,
  path: string,
  allowed: readonly T[],
  fallback: T,
): T {
  const value = optionalString(body, key, path)
  if (value === undefined) return fallback
  if (!(allowed as readonly string[]).includes(value)) {
    throw fieldError(path, `must be one of ${allowed.map((a) => `"${a}"`).join(', ')}`, value)
  }
  return value as T
}

/**
 * Parse `raw` (the value of the `merged_adapters` field at `path`). `source` is the request's
 * `adapter_source` (or the server default): every input is fetched from it.
 */
export function parseMergedAdapters(raw: unknown, path: string, source: string): MergedAdaptersRequest {
  const body = expectObject(raw, path)
  rejectUnknownKeys(body, FIELDS, path)

  const ids = body.ids
  if (ids === undefined || ids === null || (Array.isArray(ids) && ids.length === 0)) {
    throw fieldError(`${path}.ids`, 'must hold at least one adapter ID when `merged_adapters` is set', ids)
  }
  if (!Array.isArray(ids) || ids.some((id) => typeof id !== 'string')) {
    throw fieldError(`${path}.ids`, 'must be an array of adapter ID strings', ids)
  }
  if (ids.length > MAX_MERGED_ADAPTERS) {
    throw fieldError(`${path}.ids`, `must hold at most ${MAX_MERGED_ADAPTERS} adapter IDs`, ids)
  }
  ids.forEach((id: string, i) => {
    // The base model has no weights to merge (LoRAX refuses it too).
    if (id.length === 0)
      throw fieldError(`${path}.ids[${i}]`, 'must not be empty (the base model cannot be merged)', id)
    checkIdentifier(id, `${path}.ids[${i}]`, MAX_ADAPTER_ID_LENGTH)
  })

  const weights = body.weights ?? []
  if (!Array.isArray(weights) || weights.some((w) => typeof w !== 'number' || !Number.isFinite(w))) {
    throw fieldError(`${path}.weights`, 'must be an array of finite numbers', weights)
  }
  if (weights.length > 0 && weights.every((w: number) => w === 0)) {
    throw fieldError(`${path}.weights`, 'must not all be 0 (the merge would have no weights)', weights)
  }
  // Bounded so the merged factors stay finite in f32 (1e308 passed the check above and failed
  // later, as an adapter-load error naming no field).
  weights.forEach((w: number, i) => {
    if (Math.abs(w) > MAX_MERGE_WEIGHT) {
      throw fieldError(`${path}.weights[${i}]`, `must be between -${MAX_MERGE_WEIGHT} and ${MAX_MERGE_WEIGHT}`, w)
    }
  })
  if (weights.length !== ids.length) {
    throw fieldError(
      `${path}.weights`,
      `must have one weight per adapter ID (the number of adapter IDs, ${ids.length}, must match the number of adapter weights)`,
      weights,
    )
  }

  const strategy = oneOf<MergeStrategy>(
    body,
    'merge_strategy',
    `${path}.merge_strategy`,
    MERGE_STRATEGIES,
    DEFAULT_MERGE_STRATEGY,
  )
  const density = optionalNumber(body, 'density', `${path}.density`, { min: 0, max: 1 }) ?? DEFAULT_DENSITY
  if (usesDensity(strategy) && density === 0) {
    // LoRAX accepts this and silently merges nothing (every entry pruned); refuse it instead.
    throw fieldError(
      `${path}.density`,
      `must be > 0 and <= 1 with merge_strategy "${strategy}" (the fraction of entries each adapter keeps)`,
      body.density ?? density,
    )
  }
  const majoritySignMethod = oneOf<MajoritySignMethod>(
    body,
    'majority_sign_method',
    `${path}.majority_sign_method`,
    MAJORITY_SIGN_METHODS,
    DEFAULT_MAJORITY_SIGN_METHOD,
  )
  const seed =
    optionalNumber(body, 'seed', `${path}.seed`, { integer: true, min: 0, max: 0xffffffff }) ?? DEFAULT_MERGE_SEED

  return {
    inputs: ids.map((id: string) => ({ source, id })),
    weights: weights as number[],
    strategy,
    density,
    majoritySignMethod,
    seed,
  }
}
