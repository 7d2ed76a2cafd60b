/**
 * One request's structured-output state: an XGrammar `GrammarMatcher` behind the `TokenConstraint`
 * contract.
 *
 * XGrammar aborts its whole wasm instance on a misuse (a mask asked for after the stop token, a
 * rollback past the start), so every call is guarded here and never reaches XGrammar out of range.
 */
import type { TokenConstraint } from '../contracts/grammar.ts'

/** The parts of an XGrammar `GrammarMatcher`'s binding handle this wrapper calls (synchronous). */
export interface MatcherHandle {
  GetNextTokenBitmask(vocabSize: number): VectorHandle
  AcceptToken(tokenId: number, verbose: boolean): boolean
  Rollback(count: number): void
  IsTerminated(): boolean
  delete(): void
}

/** An embind `std::vector<int32_t>`; `$$.ptr` is the address of the vector object in wasm memory. */
interface VectorHandle {
  size(): number
  get(i: number): number
  delete(): void
  readonly $$?: { readonly ptr?: number }
}

// A request dropped without `dispose()` still frees its matcher once garbage collected.
const released = new FinalizationRegistry<MatcherHandle>((handle) => handle.delete())

export class XGrammarConstraint implements TokenConstraint {
  readonly #handle: MatcherHandle
  readonly #vocabSize: number
  readonly #eosTokenIds: readonly number[]
  readonly #memory: WebAssembly.Memory | null
  /** Tokens XGrammar has accepted (what it can roll back). */
  #accepted = 0
  /** Eos tokens accepted after termination, which XGrammar never saw. */
  #afterEnd = 0
  #disposed = false

  /**
   * @param handle the matcher's binding handle (owned from now on)
   * @param vocabSize the model's logits width; the mask covers exactly this many ids
   * @param eosTokenIds the stop tokens the matcher was built with
   * @param memory the wasm memory of the matcher's instance, for block copies (null: word by word)
   */
  constructor(
    handle: MatcherHandle,
    vocabSize: number,
    eosTokenIds: readonly number[],
    memory: WebAssembly.Memory | null,
  ) {
    this.#handle = handle
    this.#vocabSize = vocabSize
    this.#eosTokenIds = eosTokenIds
    this.#memory = memory
    released.register(this, handle, this)
  }

  fillNextTokenMask(mask: Uint32Array): boolean {
    this.#checkLive()
    const words = Math.ceil(this.#vocabSize / 32)
    if (this.isTerminated()) {
      mask.fill(0)
      for (const id of this.#eosTokenIds) if (id < this.#vocabSize) mask[id >>> 5]! |= 1 << (id & 31)
      return true
    }
    const vector = this.#handle.GetNextTokenBitmask(this.#vocabSize)
    try {
      const n = Math.min(vector.size(), words, mask.length)
      if (!this.#copyBlock(vector, mask, n)) for (let i = 0; i < n; i++) mask[i] = vector.get(i)
      mask.fill(0, n)
    } finally {
      vector.delete()
    }
    // Bits past the vocabulary in the last word stay clear whatever XGrammar left there.
    const tail = this.#vocabSize & 31
    if (tail !== 0 && words - 1 < mask.length) mask[words - 1]! &= (1 << tail) - 1
    return true
  }

  accept(tokenId: number): boolean {
    this.#checkLive()
    if (this.isTerminated()) {
      // Only eos may follow the end; XGrammar itself refuses any token after its stop token.
      if (!this.#eosTokenIds.includes(tokenId)) return false
      this.#afterEnd++
      return true
    }
    if (!Number.isInteger(tokenId) || tokenId < 0 || tokenId >= this.#vocabSize) return false
    if (!this.#handle.AcceptToken(tokenId, false)) return false
    this.#accepted++
    return true
  }

  rollback(count: number): void {
    this.#checkLive()
    if (!Number.isInteger(count) || count < 0 || count > this.#accepted + this.#afterEnd) {
      throw new RangeError(`cannot roll back ${count} tokens: ${this.#accepted + this.#afterEnd} accepted`)
    }
    const fromEnd = Math.min(count, this.#afterEnd)
    this.#afterEnd -= fromEnd
    const rest = count - fromEnd
    if (rest > 0) {
      this.#handle.Rollback(rest)
      this.#accepted -= rest
    }
  }

  isTerminated(): boolean {
    this.#checkLive()
    return this.#handle.IsTerminated()
  }

  /** Free the matcher now (otherwise it is freed when this object is garbage collected). */
  dispose(): void {
    if (this.#disposed) return
    this.#disposed = true
    released.unregister(this)
    this.#handle.delete()
  }

  #checkLive(): void {
    if (this.#disposed) throw new Error('XGrammarConstraint used after dispose()')
  }

  /**
   * Copy `n` words straight out of wasm memory. libc++'s `std::vector` starts with its begin and
   * end pointers; the vector's own `size()` confirms the layout before anything is read.
   */
  #copyBlock(vector: VectorHandle, mask: Uint32Array, n: number): boolean {
    const ptr = vector.$$?.ptr
    if (this.#memory === null || typeof ptr !== 'number') return false
    const heap = new Uint32Array(this.#memory.buffer)
    const begin = heap[ptr >>> 2]!
    const end = heap[(ptr >>> 2) + 1]!
    if (begin % 4 !== 0 || end < begin || (end - begin) / 4 !== vector.size()) return false
    mask.set(heap.subarray(begin >>> 2, (begin >>> 2) + n))
    return true
  }
}
