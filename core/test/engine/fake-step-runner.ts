import type {
  LoraWeights,
  MedusaWeights,
  ModelSpec,
  StepBatch,
  StepOutput,
  StepRunner,
} from '../../src/contracts/step-runner.ts'
import { LoomError } from '../../src/errors/index.ts'

/**
 * A deterministic StepRunner for engine tests. It keeps a real paged "KV cache" of token ids, so
 * the logits of a position are a hash of the token history **as read back through the block
 * table** plus the row's adapter slot: a wrong block table, a block shared by two live sequences
 * or a stale cache entry changes the output, and is also recorded in `violations`.
 */

export interface FakeStepRunnerOptions {
  vocabSize?: number
  kvBlockCount?: number
  kvBlockSize?: number
  maxContextLength?: number
  adapterSlots?: number
  maxLoraRank?: number
  /** Wall-clock delay of every step (a macrotask), to let tests act while a step is in flight. */
  stepDelayMs?: number
  /**
   * Derive an adapter row's logits from the key of the weights in its slot (`adapterSalt(key)`)
   * instead of the slot number, so an adapter gives the same tokens whichever slot it lands in
   * (for eviction tests, where an adapter comes back in another slot).
   */
  saltByAdapterKey?: boolean
  /** Called before each step with its index; throw to make the step fail. */
  beforeStep?: (batch: StepBatch, index: number) => void
}

export interface RecordedRow {
  readonly seqId: number
  readonly tokens: number[]
  readonly cacheLen: number
  readonly loraSlot: number
  readonly logitIndices: number[]
  readonly blockTable: number[]
}

/** FNV-1a style running hash over token ids. */
export function hashStep(h: number, token: number): number {
  h = Math.imul(h ^ (token & 0xffff), 16777619) >>> 0
  return Math.imul(h ^ (token >>> 16), 16777619) >>> 0
}

const HASH_SEED = 2166136261

function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x7feb352d) >>> 0
  x = Math.imul(x ^ (x >>> 15), 0x846ca68b) >>> 0
  return (x ^ (x >>> 16)) >>> 0
}

/** Logits after `history` under adapter `loraSlot` (-1: base), written to `out` at `offset`. */
export function fakeLogitsFromHash(
  h: number,
  loraSlot: number,
  vocabSize: number,
  out: Float32Array,
  offset = 0,
): void {
  const key = mix32(h ^ Math.imul(loraSlot + 2, 0x9e3779b1))
  for (let v = 0; v < vocabSize; v++) {
    const x = mix32(key ^ Math.imul(v + 1, 0x85ebca6b))
    out[offset + v] = (x / 4294967296) * 8 - 4
  }
}

/** The logits the fake model produces after `history` (the reference for expected outputs). */
export function fakeLogits(history: readonly number[], loraSlot: number, vocabSize: number): Float32Array {
  let h = HASH_SEED
  for (const t of history) h = hashStep(h, t)
  const out = new Float32Array(vocabSize)
  fakeLogitsFromHash(h, loraSlot, vocabSize, out)
  return out
}

/** The number an adapter's key stands for in the fake logits when `saltByAdapterKey` is on. */
export function adapterSalt(key: string): number {
  let h = HASH_SEED
  for (let i = 0; i < key.length; i++) h = hashStep(h, key.charCodeAt(i))
  return 1000 + (h & 0xffffff)
}

/** Greedy continuation computed directly from `fakeLogits`, with no engine involved. */
export function fakeGreedy(
  prompt: readonly number[],
  loraSlot: number,
  vocabSize: number,
  maxNewTokens: number,
  eosTokenIds: readonly number[] = [],
): number[] {
  const history = [...prompt]
  const out: number[] = []
  while (out.length < maxNewTokens) {
    const logits = fakeLogits(history, loraSlot, vocabSize)
    let best = 0
    for (let v = 1; v < vocabSize; v++) if (logits[v]! > logits[best]!) best = v
    out.push(best)
    history.push(best)
    if (eosTokenIds.includes(best)) break
  }
  return out
}

export class FakeStepRunner implements StepRunner {
  readonly spec: ModelSpec
  readonly batches: RecordedRow[][] = []
  readonly violations: string[] = []
  readonly loadedWeights: (LoraWeights | MedusaWeights | null)[]
  readonly unloadedSlots: number[] = []
  loadCalls = 0
  /** Successful `loadAdapter` calls. */
  adapterLoads = 0
  closeCalls = 0
  /** True while a step is executing (used to check steps never overlap adapter loads). */
  private busy = false
  private readonly options: FakeStepRunnerOptions
  /** Token id stored in each cache slot, and the sequence that wrote it (-1: never written). */
  private readonly kvTokens: Int32Array
  private readonly kvOwner: Int32Array
  /** The weights each sequence's rows used first: a sequence must never see its adapter swapped. */
  private readonly seqWeights = new Map<number, LoraWeights | MedusaWeights>()

  constructor(options: FakeStepRunnerOptions = {}) {
    this.options = options
    const kvBlockCount = options.kvBlockCount ?? 64
    const kvBlockSize = options.kvBlockSize ?? 4
    this.spec = {
      architecture: 'FakeForCausalLM',
      dtype: 'float32',
      device: 'cpu',
      vocabSize: options.vocabSize ?? 64,
      hiddenSize: 16,
      intermediateSize: 32,
      numLayers: 2,
      numHeads: 2,
      numKvHeads: 1,
      headDim: 8,
      maxContextLength: options.maxContextLength ?? 256,
      kvBlockSize,
      kvBlockCount,
      adapterSlots: options.adapterSlots ?? 4,
      maxLoraRank: options.maxLoraRank ?? 64,
    }
    this.loadedWeights = Array.from({ length: this.spec.adapterSlots }, () => null)
    this.kvTokens = new Int32Array(kvBlockCount * kvBlockSize).fill(-1)
    this.kvOwner = new Int32Array(kvBlockCount * kvBlockSize).fill(-1)
  }

  async load(): Promise<ModelSpec> {
    this.loadCalls++
    return this.spec
  }

  async loadAdapter(weights: LoraWeights | MedusaWeights): Promise<number> {
    if (this.busy) this.violations.push('loadAdapter during a step')
    const slot = this.loadedWeights.indexOf(null)
    if (slot < 0) throw new LoomError('adapter_slots_full', { slots: this.spec.adapterSlots })
    this.loadedWeights[slot] = weights
    this.adapterLoads++
    return slot
  }

  async unloadAdapter(slot: number): Promise<void> {
    if (this.busy) this.violations.push('unloadAdapter during a step')
    if (this.loadedWeights[slot] === null) this.violations.push(`unload of empty slot ${slot}`)
    this.loadedWeights[slot] = null
    this.unloadedSlots.push(slot)
  }

  async step(batch: StepBatch): Promise<StepOutput> {
    if (this.busy) this.violations.push('overlapping steps')
    this.busy = true
    try {
      const index = this.batches.length
      this.batches.push(
        batch.rows.map((row) => ({
          seqId: row.seqId,
          tokens: [...row.tokens],
          cacheLen: row.cacheLen,
          loraSlot: row.loraSlot,
          logitIndices: [...row.logitIndices],
          blockTable: [...row.blockTable],
        })),
      )
      this.options.beforeStep?.(batch, index)
      if (this.options.stepDelayMs !== undefined && this.options.stepDelayMs > 0) {
        await new Promise((resolve) => setTimeout(resolve, this.options.stepDelayMs))
      } else {
        await Promise.resolve()
      }
      return this.forward(batch)
    } finally {
      this.busy = false
    }
  }

  async close(): Promise<void> {
    this.closeCalls++
  }

  private forward(batch: StepBatch): StepOutput {
    const { vocabSize: V, kvBlockSize: bs } = this.spec
    let logitRows = 0
    for (const row of batch.rows) logitRows += row.logitIndices.length
    const logits = new Float32Array(logitRows * V)
    const blocksInBatch = new Map<number, number>()
    let out = 0
    for (const row of batch.rows) {
      const n = row.tokens.length
      const where = `step ${this.batches.length - 1} seq ${row.seqId}`
      if (row.blockTable.length < Math.ceil((row.cacheLen + n) / bs))
        this.violations.push(`${where}: short block table`)
      for (const block of row.blockTable) {
        const other = blocksInBatch.get(block)
        if (other !== undefined && other !== row.seqId) this.violations.push(`${where}: block ${block} shared`)
        blocksInBatch.set(block, row.seqId)
      }
      const weights = row.loraSlot >= 0 ? this.loadedWeights[row.loraSlot] : null
      if (row.loraSlot >= 0 && weights === null) {
        this.violations.push(`${where}: lora slot ${row.loraSlot} not loaded`)
      }
      if (weights !== null && weights !== undefined) {
        const first = this.seqWeights.get(row.seqId)
        if (first === undefined) this.seqWeights.set(row.seqId, weights)
        else if (first !== weights) this.violations.push(`${where}: adapter ${first.key} swapped for ${weights.key}`)
      }
      const salt = weights && this.options.saltByAdapterKey ? adapterSalt(weights.key) : row.loraSlot
      const slotOf = (c: number): number => row.blockTable[Math.floor(c / bs)]! * bs + (c % bs)
      let h = HASH_SEED
      for (let c = 0; c < row.cacheLen; c++) {
        const slot = slotOf(c)
        if (this.kvOwner[slot] !== row.seqId) this.violations.push(`${where}: cache entry ${c} not written by it`)
        h = hashStep(h, this.kvTokens[slot]!)
      }
      let next = 0
      for (let i = 0; i < n; i++) {
        if (row.positions[i] !== row.cacheLen + i)
          this.violations.push(`${where}: position ${i} is ${row.positions[i]}`)
        const slot = slotOf(row.cacheLen + i)
        this.kvTokens[slot] = row.tokens[i]!
        this.kvOwner[slot] = row.seqId
        h = hashStep(h, row.tokens[i]!)
        if (next < row.logitIndices.length && row.logitIndices[next] === i) {
          fakeLogitsFromHash(h, salt, V, logits, out * V)
          out++
          next++
        }
      }
      if (next !== row.logitIndices.length) this.violations.push(`${where}: bad logitIndices`)
    }
    return { logits, medusaLogits: new Float32Array(0) }
  }
}
