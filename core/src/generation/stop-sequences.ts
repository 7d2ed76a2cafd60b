/**
 * Finds the first stop sequence in generated text as it grows. Only the tail that could contain a
 * new match is searched each time, so the cost per token is bounded by the longest stop sequence.
 */
export class StopSequenceMatcher {
  readonly #stops: readonly string[]
  readonly #longest: number
  #text = ''

  constructor(stops: readonly string[]) {
    this.#stops = stops
    this.#longest = stops.reduce((max, s) => Math.max(max, s.length), 0)
  }

  /**
   * Append `delta`; return the index in the full text just past the end of the first stop sequence
   * found (the text to keep), or -1.
   */
  push(delta: string): number {
    if (this.#stops.length === 0 || delta.length === 0) {
      this.#text += delta
      return -1
    }
    const from = Math.max(0, this.#text.length - this.#longest + 1)
    this.#text += delta
    let best = -1
    for (const stop of this.#stops) {
      const at = this.#text.indexOf(stop, from)
      if (at >= 0 && (best < 0 || at + stop.length < best)) best = at + stop.length
    }
    return best
  }
}
