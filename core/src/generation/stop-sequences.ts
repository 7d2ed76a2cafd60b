/**
 * Applies stop sequences to generated text as it grows, and decides how much text is safe to
 * emit. Only the tail that could contain a new match is searched each time, so the cost per token
 * is bounded by the longest stop sequence.
 *
 * Two modes: `include` (native API, as TGI/LoRAX: the output ends with the stop sequence) and
 * `exclude` (OpenAI API: the stop sequence is cut off). In `exclude` mode, text that might be the
 * start of a stop sequence is held back until it is known not to be.
 */
export class StopSequenceMatcher {
  readonly #stops: readonly string[]
  readonly #longest: number
  readonly #include: boolean
  #text = ''
  #emitted = 0

  constructor(stops: readonly string[], include: boolean) {
    this.#stops = stops
    this.#longest = stops.reduce((max, s) => Math.max(max, s.length), 0)
    this.#include = include
  }

  /** Append generated text; returns the text now safe to emit and whether a stop sequence matched. */
  push(delta: string): { emit: string; stopped: boolean } {
    const from = Math.max(0, this.#text.length - this.#longest + 1)
    this.#text += delta
    let matchStart = -1
    let matchEnd = -1
    for (const stop of this.#stops) {
      const at = this.#text.indexOf(stop, from)
      if (at >= 0 && (matchEnd < 0 || at + stop.length < matchEnd)) {
        matchStart = at
        matchEnd = at + stop.length
      }
    }
    if (matchEnd >= 0) return { emit: this.#take(this.#include ? matchEnd : matchStart), stopped: true }
    return { emit: this.#take(this.#text.length - this.#heldBack()), stopped: false }
  }

  /** Everything not yet emitted (at the end of generation, when no stop sequence can follow). */
  flush(): string {
    return this.#take(this.#text.length)
  }

  /** Length of the longest tail of the text that is a proper prefix of a stop sequence (exclude mode). */
  #heldBack(): number {
    if (this.#include) return 0
    const text = this.#text
    for (let n = Math.min(this.#longest - 1, text.length - this.#emitted); n > 0; n--) {
      const tail = text.slice(text.length - n)
      if (this.#stops.some((stop) => stop.startsWith(tail))) return n
    }
    return 0
  }

  #take(end: number): string {
    if (end <= this.#emitted) return ''
    const out = this.#text.slice(this.#emitted, end)
    this.#emitted = end
    return out
  }
}
