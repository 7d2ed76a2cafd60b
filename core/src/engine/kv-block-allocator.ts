/**
 * The engine's view of the runner's paged KV cache: `blockCount` blocks of `blockSize` token slots.
 * Blocks are handed out from a LIFO free list (recently freed blocks are likely still in cache).
 * A double free throws: it would let two sequences write the same slots.
 */
export class KvBlockAllocator {
  readonly blockCount: number
  readonly blockSize: number
  private readonly freeList: number[]
  private readonly inUse: Uint8Array

  constructor(blockCount: number, blockSize: number) {
    if (!Number.isInteger(blockCount) || blockCount < 1) throw new RangeError(`blockCount must be >= 1: ${blockCount}`)
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new RangeError(`blockSize must be >= 1: ${blockSize}`)
    this.blockCount = blockCount
    this.blockSize = blockSize
    this.inUse = new Uint8Array(blockCount)
    // Reverse order so the first allocations get blocks 0, 1, 2, … (readable logs and tests).
    this.freeList = Array.from({ length: blockCount }, (_, i) => blockCount - 1 - i)
  }

  get free(): number {
    return this.freeList.length
  }

  /** Blocks needed to hold `tokens` cache entries. */
  blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.blockSize)
  }

  /** Take `count` blocks, or none (null) when fewer are free. */
  allocate(count: number): number[] | null {
    if (count > this.freeList.length) return null
    const out: number[] = []
    for (let i = 0; i < count; i++) {
      const id = this.freeList.pop()!
      this.inUse[id] = 1
      out.push(id)
    }
    return out
  }

  release(blocks: readonly number[]): void {
    for (const id of blocks) {
      if (this.inUse[id] !== 1) throw new Error(`KV block ${id} freed twice`)
      this.inUse[id] = 0
      this.freeList.push(id)
    }
  }
}
