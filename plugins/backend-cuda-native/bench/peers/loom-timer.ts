/**
 * Loom's side of the peer benchmark: the `NativeStepRunner` driven directly, as the engine would.
 * Decode follows `timeDecode` of decode-timer.ts (B fresh sequences prefilled with a short prompt
 * in one step, then one token per sequence per step, a greedy token for every row), written here
 * with greedy sampling rows. Prefill is one step of one fresh sequence carrying the whole prompt,
 * sampling (greedy) only after its last token. The greedy probe runs a prompt and a few greedy
 * steps and keeps each chosen token's log-softmax, to check that both engines hold the same model.
 */
import { GREEDY_ROW_SAMPLING, type StepBatch, type StepRow } from '@loom/core'
import type { NativeStepRunner } from '../../src/index.ts'
import { benchToken } from './bench-tokens.ts'

const batchOf = (rows: StepRow[]): StepBatch => ({ rows, kvCopies: [], topLogprobs: 0, draftTopK: 1 })

/** A row of `tokens` after `cacheLen` committed ones of a sequence whose blocks start at `firstBlock`. */
function freshRow(
  seqId: number,
  tokens: readonly number[],
  cacheLen: number,
  blockSize: number,
  firstBlock = 0,
): StepRow {
  const n = tokens.length
  return {
    seqId,
    tokens: Int32Array.from(tokens),
    positions: Int32Array.from(tokens, (_, i) => cacheLen + i),
    cacheLen,
    blockTable: Int32Array.from({ length: Math.ceil((cacheLen + n) / blockSize) }, (_, i) => firstBlock + i),
    loraSlot: -1,
    sampling: GREEDY_ROW_SAMPLING,
    scoreTargets: new Int32Array(0),
    medusaSlot: -1,
    medusaHeads: 0,
  }
}

/**
 * Step wall times (ms) of `timedSteps` decode steps of `batch` fresh sequences (ids 1..B, each
 * prefilled with `promptTokens` in one step), after `warmupSteps`. Every run starts from block 0:
 * earlier runs' sequences are abandoned, so their blocks are free.
 */
export async function loomDecode(
  runner: NativeStepRunner,
  o: { batch: number; promptTokens: number; warmupSteps: number; timedSteps: number; blockSize: number },
): Promise<number[]> {
  const perSeqBlocks = Math.ceil((o.promptTokens + o.warmupSteps + o.timedSteps) / o.blockSize)
  const seqs = Array.from({ length: o.batch }, (_, i) => ({ seqId: i + 1, firstBlock: i * perSeqBlocks }))
  const row = (s: (typeof seqs)[number], tokens: number[], cacheLen: number): StepRow =>
    freshRow(s.seqId, tokens, cacheLen, o.blockSize, s.firstBlock)
  const prompt = (seqId: number): number[] => Array.from({ length: o.promptTokens }, (_, p) => benchToken(seqId, p))
  await runner.step(batchOf(seqs.map((s) => row(s, prompt(s.seqId), 0))))
  const stepMs: number[] = []
  for (let i = 0; i < o.warmupSteps + o.timedSteps; i++) {
    const cacheLen = o.promptTokens + i
    const rows = seqs.map((s) => row(s, [benchToken(s.seqId, cacheLen)], cacheLen))
    const t0 = process.hrtime.bigint()
    await runner.step(batchOf(rows))
    const ms = Number(process.hrtime.bigint() - t0) / 1e6
    if (i >= o.warmupSteps) stepMs.push(ms)
  }
  return stepMs
}

/** Wall time (ms) of each of `repeats` prefills of a `promptTokens`-token prompt. */
export async function loomPrefill(
  runner: NativeStepRunner,
  o: { promptTokens: number; repeats: number; blockSize: number },
): Promise<number[]> {
  const prompt = Array.from({ length: o.promptTokens }, (_, p) => benchToken(1, p))
  const ms: number[] = []
  for (let r = 0; r < o.repeats; r++) {
    const rows = [freshRow(1, prompt, 0, o.blockSize)]
    const t0 = process.hrtime.bigint()
    await runner.step(batchOf(rows))
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
  return ms
}

/** The greedy tokens after `prompt` and `steps` further steps, with each one's raw log-softmax. */
export async function loomGreedy(
  runner: NativeStepRunner,
  prompt: readonly number[],
  steps: number,
  blockSize: number,
): Promise<{ tokens: number[]; logprobs: number[] }> {
  let cacheLen = 0
  const tokens: number[] = []
  const logprobs: number[] = []
  let input: readonly number[] = prompt
  for (let i = 0; i <= steps; i++) {
    const out = await runner.step(batchOf([freshRow(1, input, cacheLen, blockSize)]))
    cacheLen += input.length
    tokens.push(out.tokens[0]!)
    logprobs.push(out.logprobs[0]!)
    input = [out.tokens[0]!]
  }
  return { tokens, logprobs }
}
