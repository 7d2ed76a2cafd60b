import type { KvCopy, StepRow } from '../contracts/step-runner.ts'
import type { SubTree } from './medusa/tree-family.ts'
import { rowSampling } from './row-sampling.ts'
import type { Sequence } from './sequence.ts'

const NO_INDICES = new Int32Array(0)

/** One row of a planned step and what to do with its results afterwards. */
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
  /** The row scores every chunk position's next prompt token (the prompt's logprobs). */
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
 * cover `cacheLen + chunk` entries: linear positions, causal attention. A chunk that reaches the
 * end of the known tokens samples the next one; with `medusaHeads` > 0, the first that many of the
 * sequence's heads run there too, so the next step has candidates to verify.
 */
export function buildRow(seq: Sequence, chunk: number, vocabSize: number, medusaHeads = 0): PlannedRow {
  const start = seq.cacheLen
  const end = start + chunk
  const tokens = Int32Array.from(seq.tokens.slice(start, end))
  const positions = new Int32Array(chunk)
  for (let i = 0; i < chunk; i++) positions[i] = start + i
  const samples = end === seq.tokens.length
  // Prompt logprobs are gathered only during the first pass over the prompt, never on a recompute.
  const prefillLogits = seq.prefillTokens !== null && !seq.prefillDone
  let scoreTargets = NO_INDICES
  if (prefillLogits) {
    scoreTargets = new Int32Array(chunk)
    for (let i = 0; i < chunk; i++) scoreTargets[i] = start + i + 1 < seq.promptLength ? seq.tokens[start + i + 1]! : -1
  }
  const heads = medusaHeads > 0 && samples && seq.medusaSlot >= 0
  const blockTable = Int32Array.from(seq.blocks)
  const row: StepRow = {
    seqId: seq.seqId,
    tokens,
    positions,
    cacheLen: start,
    blockTable,
    loraSlot: seq.loraSlot,
    sampling: samples ? rowSampling(seq, vocabSize, null) : null,
    scoreTargets,
    medusaSlot: heads ? seq.medusaSlot : -1,
    medusaHeads: heads ? medusaHeads : 0,
  }
  return { seq, row, chunk, samples, prefillLogits, treeNodes: 0, subTree: null, kvCopy: takeCopy(seq, blockTable) }
}

/**
 * Build a verification row for a decoding sequence with a draft (Medusa heads' or prompt
 * lookup's): the last sampled token (the root, not yet in the cache) plus the first `nodes - 1`
 * candidates of `subTree` (a tree of the family, its candidates taken from the draft of the full
 * tree), at positions `cacheLen + depth`, attending to their ancestors only. Every node is sampled;
 * the first `medusaHeads` of the sequence's heads (if it has any) run where the runner's walk
 * ends, which is where the engine's walk ends too. The sequence's blocks must cover
 * `cacheLen + nodes` entries.
 */
export function buildTreeRow(
  seq: Sequence,
  subTree: SubTree,
  nodes: number,
  vocabSize: number,
  medusaHeads: number,
): PlannedRow {
  const start = seq.cacheLen
  const draft = seq.draft!
  const { tree, fullNode } = subTree
  // The draft is numbered by the full tree.
  const tokens = new Int32Array(nodes)
  const positions = new Int32Array(nodes)
  for (let i = 0; i < nodes; i++) {
    tokens[i] = draft.tokens[fullNode[i]!]!
    positions[i] = start + tree.depth[i]!
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
    sampling: rowSampling(seq, vocabSize, { tokens, parents: tree.parent.subarray(0, nodes) }),
    scoreTargets: NO_INDICES,
    medusaSlot: seq.medusaSlot,
    medusaHeads: seq.medusaSlot >= 0 ? medusaHeads : 0,
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
