/**
 * The identity of a merged adapter: a hash of everything its weights depend on. Two requests with
 * the same key share one computation and one cache entry; a changed input (a new revision), weight
 * or parameter gives a new key. Parameters a strategy ignores are left out, so e.g. `density` on a
 * `linear` merge does not split the cache.
 */
import { createHash } from 'node:crypto'
import type { ResolvedAdapter } from '../../contracts/adapter.ts'
import { usesDensity, usesRandomPruning, usesSignElection, type MergedAdaptersRequest } from './merge-params.ts'

/** Bumped whenever the merge maths or the written format changes, so old cache entries are not reused. */
export const MERGE_FORMAT_VERSION = 1

/** The canonical description of a merge that its key hashes (also written next to the cached files). */
export function mergeIdentity(
  inputs: readonly ResolvedAdapter[],
  request: MergedAdaptersRequest,
  maxLoraRank: number,
): Record<string, unknown> {
  const { strategy } = request
  return {
    format: MERGE_FORMAT_VERSION,
    inputs: inputs.map((r) => ({ source: r.source, id: r.id, revision: r.revision })),
    weights: request.weights,
    merge_strategy: strategy,
    ...(usesDensity(strategy) ? { density: request.density } : {}),
    ...(usesSignElection(strategy) ? { majority_sign_method: request.majoritySignMethod } : {}),
    ...(usesRandomPruning(strategy) ? { seed: request.seed } : {}),
    // The rank budget of every merged module depends on it.
    max_lora_rank: maxLoraRank,
  }
}

/** `merge-<40 hex digits>`: safe as an adapter id and as a path segment. */
export function mergeKey(identity: Record<string, unknown>): string {
  return `merge-${createHash('sha256').update(JSON.stringify(identity)).digest('hex').slice(0, 40)}`
}
