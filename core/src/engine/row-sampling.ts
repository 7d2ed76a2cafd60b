import type { RowSampling } from '../contracts/step-runner.ts'
import type { Sequence } from './sequence.ts'

/**
 * A verification row's nodes as sampling sees them: each node's token and parent (-1 for the root).
 * Node `i` is reached by a walk that emitted the tokens of the nodes from the root's child down to `i`.
 */
export interface TreeNodes {
  readonly tokens: Int32Array
  readonly parents: Int32Array
}

/**
 * The `RowSampling` of a sequence's next row, from its sampling state and output constraint: one
 * sampled position for a causal row, one per node of `tree` for a verification row, each node with
 * the grammar mask of the constraint advanced along the node's path (then rolled back, so the
 * sequence's own constraint is unchanged). A node whose path the grammar refuses can never be
 * reached (its parent's sample never picks a refused token): its mask stays empty.
 */
export function rowSampling(seq: Sequence, vocabSize: number, tree: TreeNodes | null): RowSampling {
  const state = seq.sampling
  const { request } = seq
  const base = {
    params: state.sampling,
    draws: state.draws,
    penalties: state.penaltyPairs(),
    topLogprobs: request.topLogprobs,
  }
  const constraint = seq.constraint
  if (constraint === null) return { ...base, allowed: null, terminated: null }
  const words = Math.ceil(vocabSize / 32)
  const positions = tree === null ? 1 : tree.tokens.length
  const allowed = new Uint32Array(positions * words)
  const terminated = new Uint8Array(positions)
  for (let p = 0; p < positions; p++) {
    const mask = allowed.subarray(p * words, (p + 1) * words)
    const path: number[] = []
    if (tree !== null) for (let j = p; j > 0; j = tree.parents[j]!) path.push(tree.tokens[j]!)
    let accepted = 0
    let reachable = true
    for (let i = path.length - 1; i >= 0 && reachable; i--) {
      // A terminated constraint takes nothing more: the path's next token would have been eos.
      reachable = !constraint.isTerminated() && constraint.accept(path[i]!)
      if (reachable) accepted++
    }
    if (reachable) {
      if (constraint.isTerminated()) {
        terminated[p] = 1
        for (const id of request.eosTokenIds) if (id >= 0 && id < vocabSize) mask[id >>> 5]! |= 1 << (id & 31)
      } else if (!constraint.fillNextTokenMask(mask)) {
        mask.fill(0xffffffff)
      }
    }
    if (accepted > 0) constraint.rollback(accepted)
  }
  return { ...base, allowed, terminated }
}
