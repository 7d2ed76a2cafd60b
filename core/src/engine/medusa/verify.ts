import type { BackendFinishReason, GeneratedToken } from '../../contracts/backend.ts'
import type { MedusaTree } from './medusa-tree.ts'

/**
 * What the runner sampled at one position, as the engine commits it: a token; `done` when the
 * output constraint terminated with nothing more to say (the sequence ends with `eos_token`);
 * `none` when the constraint and warpers allowed no token.
 */
export type Sampled = GeneratedToken | 'done' | 'none'

/** What the sample-and-match walk of one verification row gave. */
export interface Verification {
  /** Tokens to report: the first as usual, the accepted extra ones with `skipped: true`. */
  readonly emitted: readonly GeneratedToken[]
  /** The tree nodes accepted, in walk order (each a child of the one before; the root excluded). */
  readonly accepted: readonly number[]
  /** The node where the walk stopped. */
  readonly node: number
  /** Why the sequence ends here (`none`: no token allowed, a failure), or null to go on. */
  readonly ending: BackendFinishReason | 'none' | null
}

/**
 * Sample-and-match over a verification row's first `nodes` nodes: from the root, take each node's
 * token as the runner sampled it (`take(node)` commits it to the sequence: plain decoding's token
 * there) and follow the child that carries it, until no child does. Stop rules (`stop`) apply to
 * every token, so a run can end inside the accepted branch. `onMove(node, next)` sees every
 * decision (next -1: the walk stops), for the tree policy's acceptance statistics.
 */
export function walkVerification(
  tree: MedusaTree,
  nodes: number,
  rowTokens: Int32Array,
  take: (node: number) => Sampled,
  stop: (id: number) => BackendFinishReason | null,
  onMove?: (node: number, next: number) => void,
): Verification {
  const emitted: GeneratedToken[] = []
  const accepted: number[] = []
  let node = 0
  for (;;) {
    const token = take(node)
    // The tokens already chosen go out before the ending.
    if (token === 'done') return { emitted, accepted, node, ending: 'eos_token' }
    if (token === 'none') return { emitted, accepted, node, ending: 'none' }
    emitted.push(emitted.length === 0 ? token : { ...token, skipped: true })
    const ending = stop(token.id)
    if (ending !== null) return { emitted, accepted, node, ending }
    let next = -1
    for (const child of tree.children[node]!) {
      if (child < nodes && rowTokens[child] === token.id) {
        next = child
        break
      }
    }
    onMove?.(node, next)
    if (next < 0) return { emitted, accepted, node, ending: null }
    accepted.push(next)
    node = next
  }
}

/**
 * The cache moves that compact an accepted branch: the root sits at cache index `root` (committed),
 * accepted node `n` was written at `root + n` and belongs at `root + j + 1` (its place in the
 * branch). Null when every node is already in place (a chain's prefix).
 */
export function branchCompaction(root: number, accepted: readonly number[]): { from: number[]; to: number[] } | null {
  const from: number[] = []
  const to: number[] = []
  accepted.forEach((n, j) => {
    if (n !== j + 1) {
      from.push(root + n)
      to.push(root + j + 1)
    }
  })
  return from.length > 0 ? { from, to } : null
}
