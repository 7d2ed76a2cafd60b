import type { LoraWeights, MedusaWeights } from '../contracts/step-runner.ts'

type Weights = LoraWeights | MedusaWeights

/** Bytes of host memory an adapter's parsed weights hold (the typed arrays' `byteLength`). */
export function weightBytes(weights: Weights): number {
  let bytes = 0
  if (weights.kind === 'lora') {
    for (const layer of weights.layers) {
      for (const module of Object.values(layer)) bytes += module.a.byteLength + module.b.byteLength
    }
  } else {
    for (const head of weights.heads) {
      for (const block of head.blocks) bytes += block.weight.byteLength + block.bias.byteLength
      bytes += head.lmHead?.byteLength ?? 0
    }
  }
  return bytes
}

/**
 * Parsed adapter weights kept in host memory so an adapter evicted from its device slot can be
 * reloaded without reading and parsing its files again (S-LoRA keeps every adapter in host RAM;
 * we keep as many as `limitBytes` allows). Least recently used entries go first; an adapter larger
 * than the whole budget is simply not cached.
 */
export class HostWeightCache {
  readonly limitBytes: number
  /** Map order is the LRU order: first = least recently used. */
  private readonly entries = new Map<string, { weights: Weights; bytes: number }>()
  private totalBytes = 0
  private evictionCount = 0

  constructor(limitBytes: number) {
    this.limitBytes = limitBytes
  }

  get bytes(): number {
    return this.totalBytes
  }

  get size(): number {
    return this.entries.size
  }

  /** Entries dropped to stay within the budget (explicit deletes not counted). */
  get evictions(): number {
    return this.evictionCount
  }

  /** The cached weights, marked most recently used; undefined on a miss. */
  get(key: string): Weights | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    this.entries.delete(key)
    this.entries.set(key, entry)
    return entry.weights
  }

  /** Insert (or refresh) `key`, evicting least recently used entries to fit the budget. */
  put(key: string, weights: Weights): void {
    this.delete(key)
    const bytes = weightBytes(weights)
    if (bytes > this.limitBytes) return
    while (this.totalBytes + bytes > this.limitBytes) {
      const oldest = this.entries.keys().next().value as string
      this.delete(oldest)
      this.evictionCount++
    }
    this.entries.set(key, { weights, bytes })
    this.totalBytes += bytes
  }

  delete(key: string): void {
    const entry = this.entries.get(key)
    if (entry === undefined) return
    this.entries.delete(key)
    this.totalBytes -= entry.bytes
  }

  clear(): void {
    this.entries.clear()
    this.totalBytes = 0
  }
}
