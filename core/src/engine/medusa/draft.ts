import type { MedusaTree } from './medusa-tree.ts'

/**
 * Candidate tokens for the next verification step: `tokens[node]` for every tree node (node 0,
 * the root, is filled in when the row is built: it is the token sampled last). Only nodes within
 * `depth` carry candidates (a speculator may have fewer heads than the tree is deep).
 */
export interface Draft {
  readonly tokens: Int32Array
  /** Deepest usable level: `min(heads, tree depth)`. */
  readonly depth: number
}

/**
 * Build a draft from one position's Medusa head logits (`[heads, vocab]` starting at `offset`):
 * head `shift + d`'s top-k tokens (largest logit first, ties to the lower id) fill the nodes at
 * depth `d + 1` by their rank. `shift` > 0 drafts from the heads of a position `shift` tokens
 * before the one the draft follows (head `h` there predicts the token `h + 2` ahead of it), when
 * the heads were not computed at that position; the draft is then `shift` levels shallower.
 * `topIds`, when given, holds every `[vocabSize]` row's `k` best ids (`StepOutput.medusaTopIds`):
 * heads that propose up to `k` candidates take them instead of scanning their row.
 */
export function draftFromHeads(
  tree: MedusaTree,
  heads: number,
  logits: Float32Array,
  offset: number,
  vocabSize: number,
  shift = 0,
  topIds?: { readonly ids: Int32Array; readonly k: number },
): Draft {
  const depth = Math.max(0, Math.min(heads - shift, tree.maxDepth))
  const top: Int32Array[] = []
  for (let d = 0; d < depth; d++) {
    const at = offset + (shift + d) * vocabSize
    const k = tree.topKPerHead[d]!
    const row = at / vocabSize
    if (topIds !== undefined && k <= topIds.k) top.push(topIds.ids.subarray(row * topIds.k, row * topIds.k + k))
    else top.push(topK(logits, at, vocabSize, k))
  }
  const tokens = new Int32Array(tree.size)
  for (let node = 1; node < tree.size; node++) {
    const d = tree.depth[node]!
    if (d > depth) break
    // Only a vocabulary smaller than k or NaN logits leave a rank empty: propose token 0 there.
    tokens[node] = Math.max(0, top[d - 1]![tree.rank[node]!]!)
  }
  return { tokens, depth }
}

/** The `k` largest entries of `logits[offset, offset + n)` by id, best first (ties: lower id). */
export function topK(logits: Float32Array, offset: number, n: number, k: number): Int32Array {
  k = Math.min(k, n)
  if (k === 1) return Int32Array.of(argmaxOf(logits, offset, n))
  const ids = new Int32Array(k).fill(-1)
  const vals = new Float64Array(k).fill(-Infinity)
  let filled = 0
  for (let v = 0; v < n; v++) {
    const x = logits[offset + v]!
    // NaN never enters; an equal value keeps the earlier (lower) id ahead.
    if (filled === k && !(x > vals[k - 1]!)) continue
    if (Number.isNaN(x)) continue
    let i = filled < k ? filled++ : k - 1
    while (i > 0 && x > vals[i - 1]!) {
      vals[i] = vals[i - 1]!
      ids[i] = ids[i - 1]!
      i--
    }
    vals[i] = x
    ids[i] = v
  }
  return ids
}

/** The first index of the largest of `logits[offset, offset + n)` (NaN skipped; -1 if none). */
function argmaxOf(logits: Float32Array, offset: number, n: number): number {
  let best = -1
  let max = -Infinity
  const row = logits.subarray(offset, offset + n)
  for (let v = 0; v < row.length; v++) {
    const x = row[v]!
    if (x > max) {
      max = x
      best = v
    }
  }
  // All -Infinity (or NaN): the first non-NaN entry, like the general path.
  if (best < 0) for (let v = 0; v < n && best < 0; v++) if (!Number.isNaN(logits[offset + v]!)) best = v
  return best
}
