/**
 * Times decode steps of a `NativeStepRunner` the way the engine drives it: B sequences, each
 * prefilled with a short prompt in one step, then single-token decode rows for all of them per
 * step, each sampled greedily on the device with no top logprobs (the runner returns token ids,
 * never logits). Block tables and cache lengths are tracked here as the engine would.
 */
import { GREEDY_ROW_SAMPLING, type StepBatch, type StepRow } from '@loom/core'
import type { NativeStepRunner } from '../src/index.ts'

/** Which adapters the rows use: none, one shared adapter, or a different adapter per row. */
export type AdapterMix = 'base' | 'one-adapter' | 'distinct'

export interface DecodeRun {
  readonly batch: number
  readonly mix: AdapterMix
  /** Wall time of each timed decode step, ms. */
  readonly stepMs: number[]
  /** Native time in the LoRA shrink/expand kernels per timed step (mean), ms. */
  readonly loraMs: number
}

/** A step of `rows`: no cache moves, no top logprobs, no heads. */
const batchOf = (rows: StepRow[]): StepBatch => ({ rows, kvCopies: [], topLogprobs: 0, draftTopK: 1 })

/** One sequence's cache bookkeeping: its blocks and how many tokens are committed. */
class BenchSequence {
  cacheLen = 0
  readonly blocks: number[] = []
  constructor(
    readonly seqId: number,
    readonly loraSlot: number,
    private readonly blockSize: number,
    private readonly nextBlock: () => number,
  ) {}

  row(tokens: number[]): StepRow {
    const n = tokens.length
    while (this.blocks.length * this.blockSize < this.cacheLen + n) this.blocks.push(this.nextBlock())
    const row: StepRow = {
      seqId: this.seqId,
      tokens: Int32Array.from(tokens),
      positions: Int32Array.from(tokens, (_, i) => this.cacheLen + i),
      cacheLen: this.cacheLen,
      blockTable: Int32Array.from(this.blocks),
      loraSlot: this.loraSlot,
      sampling: GREEDY_ROW_SAMPLING,
      scoreTargets: new Int32Array(0),
      medusaSlot: -1,
      medusaHeads: 0,
    }
    this.cacheLen += n
    return row
  }
}

export interface DecodeOptions {
  readonly batch: number
  readonly mix: AdapterMix
  /** Loaded adapter slots; `one-adapter` uses the first, `distinct` needs one per row. */
  readonly slots: readonly number[]
  readonly promptTokens: number
  readonly warmupSteps: number
  readonly timedSteps: number
  readonly blockSize: number
}

/** Prefill B fresh sequences, run the warm-up steps, then time `timedSteps` decode steps. */
export async function timeDecode(runner: NativeStepRunner, o: DecodeOptions): Promise<DecodeRun> {
  if (o.mix === 'distinct' && o.slots.length < o.batch)
    throw new Error(`distinct adapters at batch ${o.batch} need ${o.batch} slots, have ${o.slots.length}`)
  // Every run starts from block 0: earlier runs' sequences are gone, so their blocks are free.
  let next = 0
  const alloc = (): number => next++
  const seqs = Array.from({ length: o.batch }, (_, i) => {
    const slot = o.mix === 'base' ? -1 : o.mix === 'one-adapter' ? o.slots[0]! : o.slots[i]!
    return new BenchSequence(i + 1, slot, o.blockSize, alloc)
  })
  // Token ids do not change the work done; keep them small and varied.
  const token = (seq: number, pos: number): number => 3 + ((seq * 31 + pos * 7) % 250)
  const prompt = (s: BenchSequence): number[] => Array.from({ length: o.promptTokens }, (_, p) => token(s.seqId, p))
  await runner.step(batchOf(seqs.map((s) => s.row(prompt(s)))))
  const stepMs: number[] = []
  for (let i = 0; i < o.warmupSteps + o.timedSteps; i++) {
    const rows = seqs.map((s) => s.row([token(s.seqId, s.cacheLen)]))
    if (i === o.warmupSteps) runner.profile() // reset the native counters: time only the timed steps
    const t0 = process.hrtime.bigint()
    await runner.step(batchOf(rows))
    const ms = Number(process.hrtime.bigint() - t0) / 1e6
    if (i >= o.warmupSteps) stepMs.push(ms)
  }
  const prof = runner.profile()
  return { batch: o.batch, mix: o.mix, stepMs, loraMs: prof.steps > 0 ? prof.loraMs / prof.steps : 0 }
}
