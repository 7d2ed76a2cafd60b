/**
 * Runs merges a few at a time. Each merge takes a core and holds every input's dense updates in
 * memory: twelve concurrent merges of small adapters took 2 GB and ten times as long each, so
 * distinct merges wait their turn (identical ones already share one computation).
 */
import { LoomError } from '../../errors/index.ts'

export class MergeQueue {
  readonly #limit: number
  #running = 0
  readonly #waiting: (() => void)[] = []
  #closed = false

  /** @param limit merges computed at once (at least 1) */
  constructor(limit: number) {
    this.#limit = Math.max(1, limit)
  }

  /** Run `work` once fewer than `limit` others are running; rejects with `server_closing` once closed. */
  async run<T>(work: () => Promise<T>): Promise<T> {
    while (this.#running >= this.#limit) {
      if (this.#closed) throw new LoomError('server_closing')
      await new Promise<void>((resolve) => this.#waiting.push(resolve))
    }
    if (this.#closed) throw new LoomError('server_closing')
    this.#running++
    try {
      return await work()
    } finally {
      this.#running--
      this.#waiting.shift()?.()
    }
  }

  /** Server shutdown: merges still waiting reject with `server_closing` (running ones are stopped by their signal). */
  close(): void {
    this.#closed = true
    for (const wake of this.#waiting.splice(0)) wake()
  }
}
