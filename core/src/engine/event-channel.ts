/**
 * A single-consumer async iterable fed by the engine. Events are buffered (the engine never waits
 * for a slow reader). `return()` — the consumer breaking out of `for await` — calls `onCancel`.
 */
export class EventChannel<T> implements AsyncIterable<T>, AsyncIterator<T> {
  private readonly buffer: T[] = []
  private waiter: { resolve: (r: IteratorResult<T>) => void; reject: (err: unknown) => void } | null = null
  private done = false
  private error: unknown = null
  private readonly onCancel: () => void

  constructor(onCancel: () => void) {
    this.onCancel = onCancel
  }

  /** True once `end`, `fail` or `return` has been called. */
  get closed(): boolean {
    return this.done
  }

  push(value: T): void {
    if (this.done) return
    if (this.waiter !== null) {
      const { resolve } = this.waiter
      this.waiter = null
      resolve({ value, done: false })
    } else {
      this.buffer.push(value)
    }
  }

  /** Finish normally once buffered events are read. */
  end(): void {
    if (this.done) return
    this.done = true
    if (this.waiter !== null && this.buffer.length === 0) {
      const { resolve } = this.waiter
      this.waiter = null
      resolve({ value: undefined, done: true })
    }
  }

  /** Throw `err` from the iterator once buffered events are read. */
  fail(err: unknown): void {
    if (this.done) return
    this.done = true
    this.error = err
    if (this.waiter !== null && this.buffer.length === 0) {
      const { reject } = this.waiter
      this.waiter = null
      this.error = null
      reject(err)
    }
  }

  next(): Promise<IteratorResult<T>> {
    if (this.buffer.length > 0) return Promise.resolve({ value: this.buffer.shift()!, done: false })
    if (this.error !== null) {
      const err = this.error
      this.error = null
      return Promise.reject(err)
    }
    if (this.done) return Promise.resolve({ value: undefined, done: true })
    if (this.waiter !== null) return Promise.reject(new Error('EventChannel supports one pending next() at a time'))
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject }
    })
  }

  return(): Promise<IteratorResult<T>> {
    const wasDone = this.done
    this.done = true
    this.buffer.length = 0
    this.error = null
    if (!wasDone) this.onCancel()
    return Promise.resolve({ value: undefined, done: true })
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return this
  }
}
