/**
 * Waiting requests, one FIFO queue per adapter (key: adapter key, or `base`), served round-robin so
 * a flood on one adapter cannot starve another: each admission takes the head of the next
 * non-empty queue after the one served last.
 */
export class AdapterQueues<T> {
  private readonly queues = new Map<string, T[]>()
  /** Keys with a non-empty queue, in round-robin order. */
  private readonly order: string[] = []
  /** Index in `order` of the queue to serve next. */
  private cursor = 0
  private count = 0

  get size(): number {
    return this.count
  }

  push(key: string, item: T): void {
    let queue = this.queues.get(key)
    if (queue === undefined) {
      queue = []
      this.queues.set(key, queue)
      // A new queue joins just before the cursor, i.e. it is served after everyone already waiting.
      this.order.splice(this.cursor, 0, key)
      this.cursor = (this.cursor + 1) % this.order.length
    }
    queue.push(item)
    this.count++
  }

  /** The item the next `shift()` would return. */
  peek(): T | undefined {
    if (this.order.length === 0) return undefined
    return this.queues.get(this.order[this.cursor]!)![0]
  }

  /** Take the head of the next queue in round-robin order. */
  shift(): T | undefined {
    if (this.order.length === 0) return undefined
    return this.shiftAt(this.cursor)
  }

  /**
   * The head of the first queue, in round-robin order from the cursor, whose head passes `ready`
   * (queues whose head is not ready are skipped, not blocked on), with its position for `shiftAt`.
   */
  peekReady(ready: (item: T) => boolean): { item: T; at: number } | undefined {
    const n = this.order.length
    for (let i = 0; i < n; i++) {
      const at = (this.cursor + i) % n
      const item = this.queues.get(this.order[at]!)![0]!
      if (ready(item)) return { item, at }
    }
    return undefined
  }

  /** Take the head of the queue at position `at` (from `peekReady`); the next turn goes to the queue after it. */
  shiftAt(at: number): T {
    const queue = this.queues.get(this.order[at]!)!
    const item = queue.shift()!
    this.count--
    if (queue.length === 0) {
      this.cursor = at
      this.dropKey(at)
    } else {
      this.cursor = (at + 1) % this.order.length
    }
    return item
  }

  /** Remove one item (a cancelled request). Returns whether it was queued. */
  remove(key: string, item: T): boolean {
    const queue = this.queues.get(key)
    if (queue === undefined) return false
    const index = queue.indexOf(item)
    if (index < 0) return false
    queue.splice(index, 1)
    this.count--
    if (queue.length === 0) {
      const at = this.order.indexOf(key)
      if (at < this.cursor) this.cursor--
      this.dropKey(at)
    }
    return true
  }

  /** Every queued item, queue by queue. */
  items(): T[] {
    const out: T[] = []
    for (const key of this.order) out.push(...this.queues.get(key)!)
    return out
  }

  private dropKey(at: number): void {
    this.queues.delete(this.order[at]!)
    this.order.splice(at, 1)
    if (this.order.length === 0 || this.cursor >= this.order.length) this.cursor = 0
  }
}
