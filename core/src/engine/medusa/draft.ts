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
  /** Length of the n-gram match a prompt-lookup draft follows (`lookupDraft`); 0 for the heads'. */
  readonly match: number
}

/**
 * Build a draft from the Medusa heads at the position the draft follows: `ids` holds each head's
 * `k` best ids from `offset` (`StepOutput.draftIds`: `[heads, k]`, best first); head `d`'s top
 * candidates fill the nodes at depth `d + 1` by their rank.
 */
export function draftFromIds(tree: MedusaTree, heads: number, ids: Int32Array, offset: number, k: number): Draft {
  const depth = Math.max(0, Math.min(heads, tree.maxDepth))
  const tokens = new Int32Array(tree.size)
  for (let node = 1; node < tree.size; node++) {
    const d = tree.depth[node]!
    if (d > depth) break
    const rank = tree.rank[node]!
    // Only a vocabulary smaller than k or NaN logits leave a rank empty: propose token 0 there.
    tokens[node] = rank < k ? Math.max(0, ids[offset + (d - 1) * k + rank]!) : 0
  }
  return { tokens, depth, match: 0 }
}

/**
 * A heads' draft with a prompt-lookup chain on the tree's top-1 path (`0`, `0,0`, ... as deep as
 * the chain): where the row's own text repeats, the tokens that followed the last occurrence are a
 * better first guess than the heads' (on the demo model's base requests, 2.1 tokens accepted per
 * step against 1.6 on steps with a full n-gram match). The heads' candidates keep every other
 * branch: at each level on the chain the siblings of the chain's node take the heads' ranks one
 * down (`1` gets the heads' best, `2` their second, ...), so only their lowest-ranked candidate
 * there is dropped; below a heads' node nothing changes. Verification accepts whatever matches,
 * so outputs are the same with or without the chain.
 */
export function withLookupChain(
  tree: MedusaTree,
  heads: Draft,
  chain: Draft,
  ids: Int32Array,
  offset: number,
  k: number,
): Draft {
  const tokens = new Int32Array(heads.tokens)
  const chainDepth = Math.min(chain.depth, heads.depth)
  // Nodes on the top-1 path within the chain's depth (parents precede their children).
  const onChain = new Uint8Array(tree.size)
  onChain[0] = 1
  for (let node = 1; node < tree.size; node++) {
    const d = tree.depth[node]!
    if (d > chainDepth) break
    if (onChain[tree.parent[node]!] === 0) continue // below a heads' node: unchanged
    const rank = tree.rank[node]!
    if (rank === 0) {
      onChain[node] = 1
      tokens[node] = chain.tokens[d]!
    } else {
      const below = rank - 1
      tokens[node] = below < k ? Math.max(0, ids[offset + (d - 1) * k + below]!) : 0
    }
  }
  return { tokens, depth: heads.depth, match: 0 }
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
