import type { KvCopy, StepRow } from '../contracts/step-runner.ts'
import type { MedusaTree } from './medusa/medusa-tree.ts'
import type { SubTree } from './medusa/tree-family.ts'
import type { Sequence } from './sequence.ts'

const NO_INDICES = new Int32Array(0)

/** One row of a planned step and what to do with its logits afterwards. */
export interface PlannedRow {
  readonly seq: Sequence
  readonly row: StepRow
  /**
   * Tokens committed to the cache by this step before any speculation: `tokens[cacheLen,
   * cacheLen + chunk)`. A verification row commits its root (1) plus whatever it accepts.
   */
  readonly chunk: number
  /** The chunk reaches the end of the known tokens: sample the next token from the last logits. */
  readonly samples: boolean
  /** Logits are requested at every chunk position for the prompt's logprobs. */
  readonly prefillLogits: boolean
  /** Tree nodes fed (root included) when this is a Medusa verification row, else 0. */
  readonly treeNodes: number
  /** The tree whose first `treeNodes` nodes a verification row feeds, else null. */
  readonly subTree: SubTree | null
  /** The compaction of last step's accepted branch, applied before this step's forward pass. */
  readonly kvCopy: KvCopy | null
}

/** Take the sequence's pending cache moves as a `KvCopy` over its current block table. */
function takeCopy(seq: Sequence, blockTable: Int32Array): KvCopy | null {
  const pending = seq.pendingCopy
  if (pending === null) return null
  seq.pendingCopy = null
  return { blockTable, from: Int32Array.from(pending.from), to: Int32Array.from(pending.to) }
}

/**
 * Build the row that feeds `tokens[cacheLen, cacheLen + chunk)` of a sequence whose blocks already
 * cover `cacheLen + chunk` entries: linear positions, causal attention. With `medusa`, the heads
 * run on the last position (the row samples), so the next step has candidates to verify.
 */
export function buildRow(seq: Sequence, chunk: number, medusa = false): PlannedRow {
  const start = seq.cacheLen
  const end = start + chunk
  const tokens = Int32Array.from(seq.tokens.slice(start, end))
  const positions = new Int32Array(chunk)
  for (let i = 0; i < chunk; i++) positions[i] = start + i
  const samples = end === seq.tokens.length
  // Prompt logprobs are gathered only during the first pass over the prompt, never on a recompute.
  const prefillLogits = seq.prefillTokens !== null && !seq.prefillDone
  let logitIndices: Int32Array
  if (prefillLogits) {
    logitIndices = new Int32Array(chunk)
    for (let i = 0; i < chunk; i++) logitIndices[i] = i
  } else {
    logitIndices = samples ? Int32Array.of(chunk - 1) : NO_INDICES
  }
  const heads = medusa && samples && seq.medusaSlot >= 0
  const blockTable = Int32Array.from(seq.blocks)
  const row: StepRow = {
    seqId: seq.seqId,
    tokens,
    positions,
    cacheLen: start,
    blockTable,
    loraSlot: seq.loraSlot,
    logitIndices,
    medusaSlot: heads ? seq.medusaSlot : -1,
    medusaIndices: heads ? Int32Array.of(chunk - 1) : NO_INDICES,
  }
  return { seq, row, chunk, samples, prefillLogits, treeNodes: 0, subTree: null, kvCopy: takeCopy(seq, blockTable) }
}

/**
 * Build a verification row for a decoding sequence with a draft (Medusa heads' or prompt lookup's): the last sampled token
 * (the root, not yet in the cache) plus the first `nodes - 1` candidates of `subTree` (a tree of
 * the family, its candidates taken from the draft of the full tree), at positions
 * `cacheLen + depth`, attending to their ancestors only. Logits come back for every node
 * (verification walks the tree from the root); head logits only at every `headSpacing`-th node of
 * the tree's `headNodes` (the rank-0 chain): the next draft comes from the heads at, or above, the
 * node where the walk stops, shifted.
 * The sequence's blocks must cover `cacheLen + nodes` entries.
 */
export function buildTreeRow(seq: Sequence, subTree: SubTree, nodes: number, greedyLeaf = false): PlannedRow {
  const start = seq.cacheLen
  const draft = seq.draft!
  const { tree, fullNode } = subTree
  // The draft is numbered by the full tree.
  const tokens = new Int32Array(nodes)
  const positions = new Int32Array(nodes)
  const all = new Int32Array(nodes)
  for (let i = 0; i < nodes; i++) {
    tokens[i] = draft.tokens[fullNode[i]!]!
    positions[i] = start + tree.depth[i]!
    all[i] = i
  }
  tokens[0] = seq.tokens[start]!
  const blockTable = Int32Array.from(seq.blocks)
  const row: StepRow = {
    seqId: seq.seqId,
    tokens,
    positions,
    cacheLen: start,
    blockTable,
    treeMask: tree.mask(nodes),
    loraSlot: seq.loraSlot,
    logitIndices: all,
    medusaSlot: seq.medusaSlot,
    // Greedy leaf: the runner runs the heads at the node where its greedy walk stops, the node
    // this walk will stop at too; else at spaced chain nodes, for a walk that stops anywhere.
    // A prompt-lookup row has no heads.
    medusaIndices:
      greedyLeaf || seq.medusaSlot < 0
        ? NO_INDICES
        : spacedHeadNodes(tree, nodes, headSpacing(seq.request.speculator!.size, tree.depth[nodes - 1]!)),
    ...(greedyLeaf && seq.medusaSlot >= 0 ? { medusaLeaf: true } : {}),
  }
  return {
    seq,
    row,
    chunk: 1,
    samples: true,
    prefillLogits: false,
    treeNodes: nodes,
    subTree,
    kvCopy: takeCopy(seq, blockTable),
  }
}

/**
 * Heads are asked at chain depths `0, g, 2g, ...` of a tree `depth` deep, `g = heads - depth + 1`:
 * a walk that stops at depth `t` then drafts from depth `t - j` with `j ≤ g - 1 = heads - depth`,
 * which still leaves `heads - j ≥ depth` heads, a draft as deep as the tree. Shallow trees thus
 * need the heads at the root only.
 */
export function headSpacing(heads: number, depth: number): number {
  return Math.max(1, heads - depth + 1)
}

/** `tree.headNodes` within the first `nodes` nodes at depths divisible by `spacing`. */
function spacedHeadNodes(tree: MedusaTree, nodes: number, spacing: number): Int32Array {
  const count = tree.headNodesWithin(nodes)
  const out = new Int32Array(Math.ceil(count / spacing))
  for (let i = 0; i < out.length; i++) out[i] = tree.headNodes[i * spacing]!
  return out
}
