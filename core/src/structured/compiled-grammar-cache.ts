/**
 * A bounded least-recently-used map of compiled grammars. Values are promises so that concurrent
 * requests for the same schema share one compile; a failed compile is removed so a later request
 * tries again. Evicted grammars are handed to `onEvict` (to free their wasm memory) once they
 * settle; matchers already made from them keep their own reference inside XGrammar.
 */
export class CompiledGrammarCache<T> {
  readonly #capacity: number
  readonly #onEvict: (value: T) => void
  readonly #entries = new Map<string, Promise<T>>()

  constructor(capacity: number, onEvict: (value: T) => void) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`cache capacity must be ≥ 1; got ${capacity}`)
    this.#capacity = capacity
    this.#onEvict = onEvict
  }

  get size(): number {
    return this.#entries.size
  }

  /** The cached value for `key`, or the result of `compile()` stored under it. */
  getOrCompile(key: string, compile: () => Promise<T>): Promise<T> {
    const hit = this.#entries.get(key)
    if (hit !== undefined) {
      // Re-insert: a Map iterates in insertion order, so the first key is the least recently used.
      this.#entries.delete(key)
      this.#entries.set(key, hit)
      return hit
    }
    const pending = compile()
    this.#entries.set(key, pending)
    pending.catch(() => {
      if (this.#entries.get(key) === pending) this.#entries.delete(key)
    })
    while (this.#entries.size > this.#capacity) {
      const [oldest, value] = this.#entries.entries().next().value as [string, Promise<T>]
      this.#entries.delete(oldest)
      value.then(this.#onEvict, () => undefined)
    }
    return pending
  }

  /** Drop every entry, handing each settled value to `onEvict`. */
  clear(): void {
    for (const value of this.#entries.values()) value.then(this.#onEvict, () => undefined)
    this.#entries.clear()
  }
}
