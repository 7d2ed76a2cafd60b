import type {
  LoraWeights,
  MedusaWeights,
  ModelSpec,
  StepBatch,
  StepOutput,
  StepRunner,
} from '../../src/contracts/step-runner.ts'
import { LoomError } from '../../src/errors/index.ts'
import { HostStepSampler } from '../../src/engine/sampler/host-step-sampler.ts'

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
  /**
   * Fake Medusa heads: head `h` of a loaded Medusa slot proposes, with probability
   * `medusaAccuracy[h]` (decided by a hash of the history, so runs are deterministic), the token
   * greedy decoding would produce `h + 2` positions ahead under the row's adapter — as its top-1,
   * with random runners-up; otherwise random logits. Default: all heads random.
   */
  medusaAccuracy?: readonly number[]
  /** `medusaAccuracy` for rows with a LoRA adapter (heads trained on another model); default: the same. */
  adapterMedusaAccuracy?: readonly number[]
  /** Called before each step with its index; throw to make the step fail. */
  beforeStep?: (batch: StepBatch, index: number) => void
}

export interface RecordedRow {
  readonly seqId: number
  readonly tokens: number[]
  readonly positions: number[]
  readonly cacheLen: number
  readonly loraSlot: number
  /** The row sampled (its last token, or every node of a tree row). */
  readonly sampled: boolean
  readonly scoreTargets: number[]
  readonly blockTable: number[]
  readonly treeMask: number[] | null
  readonly medusaSlot: number
  readonly medusaHeads: number
}

export interface RecordedCopy {
  readonly blockTable: number[]
  readonly from: number[]
  readonly to: number[]
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
  /** The `kvCopies` of every step, by step index. */
  readonly copies: RecordedCopy[][] = []
  readonly violations: string[] = []
  readonly loadedWeights: (LoraWeights | MedusaWeights | null)[]
  readonly unloadedSlots: number[] = []
  loadCalls = 0
  /** Successful `loadAdapter` calls. */
  adapterLoads = 0
  closeCalls = 0
  /** True while a step is executing (used to check steps never overlap adapter loads). */
  private busy = false
  private readonly sampler: HostStepSampler
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
    this.sampler = new HostStepSampler(this.spec.vocabSize)
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
          positions: [...row.positions],
          cacheLen: row.cacheLen,
          loraSlot: row.loraSlot,
          sampled: row.sampling !== null,
          scoreTargets: [...row.scoreTargets],
          blockTable: [...row.blockTable],
          treeMask: row.treeMask === undefined ? null : [...row.treeMask],
          medusaSlot: row.medusaSlot,
          medusaHeads: row.medusaHeads,
        })),
      )
      this.copies.push(batch.kvCopies.map((c) => ({ blockTable: [...c.blockTable], from: [...c.from], to: [...c.to] })))
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
    const step = this.batches.length - 1
    for (const copy of batch.kvCopies) {
      // Sequential, like the native runtime: a later move may read an entry an earlier one wrote.
      for (let i = 0; i < copy.from.length; i++) {
        const at = (c: number): number => {
          const block = copy.blockTable[Math.floor(c / bs)]
          if (block === undefined) this.violations.push(`step ${step}: kvCopies entry ${c} outside its block table`)
          return (block ?? 0) * bs + (c % bs)
        }
        const from = at(copy.from[i]!)
        const to = at(copy.to[i]!)
        this.kvTokens[to] = this.kvTokens[from]!
        this.kvOwner[to] = this.kvOwner[from]!
      }
    }
    const rowHashes: Uint32Array[] = []
    const rowSalts: number[] = []
    const blocksInBatch = new Map<number, number>()
    for (const row of batch.rows) {
      const n = row.tokens.length
      const where = `step ${step} seq ${row.seqId}`
      if (row.blockTable.length < Math.ceil((row.cacheLen + n) / bs))
        this.violations.push(`${where}: short block table`)
      for (const block of row.blockTable) {
        const other = blocksInBatch.get(block)
        if (other !== undefined && other !== row.seqId) this.violations.push(`${where}: block ${block} shared`)
        blocksInBatch.set(block, row.seqId)
      }
      const weights = row.loraSlot >= 0 ? this.loadedWeights[row.loraSlot] : null
      if (row.loraSlot >= 0 && (weights === null || weights?.kind !== 'lora')) {
        this.violations.push(`${where}: lora slot ${row.loraSlot} holds no LoRA`)
      }
      if (weights !== null && weights !== undefined) {
        const first = this.seqWeights.get(row.seqId)
        if (first === undefined) this.seqWeights.set(row.seqId, weights)
        else if (first !== weights) this.violations.push(`${where}: adapter ${first.key} swapped for ${weights.key}`)
      }
      const salt = weights && this.options.saltByAdapterKey ? adapterSalt(weights.key) : row.loraSlot
      const slotOf = (c: number): number => row.blockTable[Math.floor(c / bs)]! * bs + (c % bs)
      let h0 = HASH_SEED
      for (let c = 0; c < row.cacheLen; c++) {
        const slot = slotOf(c)
        if (this.kvOwner[slot] !== row.seqId) this.violations.push(`${where}: cache entry ${c} not written by it`)
        h0 = hashStep(h0, this.kvTokens[slot]!)
      }
      const mask = row.treeMask
      if (mask !== undefined && mask.length !== n * n) this.violations.push(`${where}: treeMask is not ${n}×${n}`)
      const hashes = new Uint32Array(n)
      for (let i = 0; i < n; i++) {
        // The history token i sees: the cache, then the new tokens it attends to, in order.
        let h = h0
        let before = 0
        for (let j = 0; j <= i; j++) {
          const visible = mask === undefined ? true : mask[i * n + j] === 1
          if (!visible) continue
          if (j < i) before++
          h = hashStep(h, row.tokens[j]!)
        }
        if (mask !== undefined && mask[i * n + i] !== 1)
          this.violations.push(`${where}: token ${i} does not see itself`)
        if (row.positions[i] !== row.cacheLen + before)
          this.violations.push(`${where}: position ${i} is ${row.positions[i]}, expected ${row.cacheLen + before}`)
        hashes[i] = h
        const slot = slotOf(row.cacheLen + i)
        this.kvTokens[slot] = row.tokens[i]!
        this.kvOwner[slot] = row.seqId
      }
      rowHashes.push(hashes)
      rowSalts.push(salt)
      for (const [i, target] of row.scoreTargets.entries()) {
        if (target >= V) this.violations.push(`${where}: score target ${target} outside the vocabulary`)
        if (target >= 0 && row.sampling !== null && i === n - 1)
          this.violations.push(`${where}: sampled position scored`)
      }
      if (row.scoreTargets.length !== 0 && row.scoreTargets.length !== n)
        this.violations.push(`${where}: scoreTargets not [n]`)
      if (row.medusaSlot < 0 && row.medusaHeads !== 0)
        this.violations.push(`${where}: medusaHeads ${row.medusaHeads} without a medusa slot`)
      if (row.medusaSlot >= 0) {
        const slotHeads = this.headsOf(row.medusaSlot)
        if (slotHeads === 0) this.violations.push(`${where}: medusa slot ${row.medusaSlot} holds no heads`)
        else if (!(row.medusaHeads >= 1 && row.medusaHeads <= slotHeads))
          this.violations.push(`${where}: medusaHeads ${row.medusaHeads} outside [1, ${slotHeads}]`)
        if (row.sampling === null) this.violations.push(`${where}: heads on a row that samples nothing`)
      }
    }
    const scratch = new Float32Array(V)
    const heads = new Float32Array(V * 8)
    return this.sampler.sample(batch, {
      logits: (r, i) => {
        fakeLogitsFromHash(rowHashes[r]![i]!, rowSalts[r]!, V, scratch)
        return { data: scratch, offset: 0 }
      },
      heads: (r, i) => {
        const row = batch.rows[r]!
        const count = row.medusaHeads
        const out = count * V <= heads.length ? heads : new Float32Array(count * V)
        for (let head = 0; head < count; head++)
          this.headLogits(rowHashes[r]![i] ?? 0, rowSalts[r]!, head, out, head * V, row.loraSlot >= 0)
        return { data: out, offset: 0 }
      },
    })
  }

  private headsOf(slot: number): number {
    const weights = this.loadedWeights[slot]
    return weights?.kind === 'medusa' ? weights.numHeads : 0
  }

  /** Fake head `head` logits after history hash `h` (see `medusaAccuracy`). */
  private headLogits(h: number, salt: number, head: number, out: Float32Array, offset: number, lora: boolean): void {
    const V = this.spec.vocabSize
    fakeLogitsFromHash(mix32(h ^ Math.imul(head + 7, 0x27d4eb2f)), salt, V, out, offset)
    const accuracies = (lora ? this.options.adapterMedusaAccuracy : undefined) ?? this.options.medusaAccuracy
    const accuracy = accuracies?.[head] ?? 0
    if (accuracy <= 0 || mix32(h ^ Math.imul(head + 1, 0x165667b1)) / 4294967296 >= accuracy) return
    // Walk greedy decoding head + 2 tokens ahead of this history.
    const scratch = new Float32Array(V)
    let token = 0
    for (let k = 0; k < head + 2; k++) {
      fakeLogitsFromHash(h, salt, V, scratch)
      token = 0
      for (let v = 1; v < V; v++) if (scratch[v]! > scratch[token]!) token = v
      h = hashStep(h, token)
    }
    out[offset + token] = 100
  }
}
