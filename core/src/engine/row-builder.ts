import type { StepRow } from '../contracts/step-runner.ts'
import type { Sequence } from './sequence.ts'

const NO_INDICES = new Int32Array(0)

/** One row of a planned step and what to do with its logits afterwards. */
export interface PlannedRow {
  readonly seq: Sequence
  readonly row: StepRow
  /** Tokens fed this step (`tokens[cacheLen, cacheLen + chunk)`). */
  readonly chunk: number
  /** The chunk reaches the end of the known tokens: sample the next token from the last logits. */
  readonly samples: boolean
  /** Logits are requested at every chunk position for the prompt's logprobs. */
  readonly prefillLogits: boolean
}

/**
 * Build the row that feeds `tokens[cacheLen, cacheLen + chunk)` of a sequence whose blocks already
 * cover `cacheLen + chunk` entries. Plain prefill/decode rows: linear positions, causal attention,
 * no Medusa (slot -1). A Medusa verification row would add candidates, a `treeMask` and
 * `medusaIndices` here.
 */
export function buildRow(seq: Sequence, chunk: number): PlannedRow {
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
  const row: StepRow = {
    seqId: seq.seqId,
    tokens,
    positions,
    cacheLen: start,
    blockTable: Int32Array.from(seq.blocks),
    loraSlot: seq.loraSlot,
    logitIndices,
    medusaSlot: -1,
    medusaIndices: NO_INDICES,
  }
  return { seq, row, chunk, samples, prefillLogits }
}
