import { alignPieces, type AlignedPiece } from './token-alignment.ts'

/** A token with its place in a choice's text. */
export type Placed<T> = AlignedPiece & { readonly token: T }

/**
 * Places one choice's tokens in its text for logprobs, as the tokens stream in or all at once, so
 * the logprobs cover exactly the text returned: streamed and non-streamed answers list the same
 * tokens with the same offsets.
 *
 * Stop sequences (the reason this exists): the text ends where a stop sequence began, but the
 * tokens that spelled the stop sequence were generated. Tokens wholly in the removed part are left
 * out, and a token the cut falls inside is kept, shown cut to the returned part (its `bytes` too),
 * with the logprob of the whole token: a client joining the tokens gets exactly the text, which is
 * what OpenAI's stop sequences give, and the probability stays the one the model assigned.
 * An end-of-sequence token that ended a choice stays listed (no text, offset at the end): it was
 * not cut off by anything, and its logprob is the model's probability of ending there.
 */
export class TokenPlacer<T> {
  readonly #pieceOf: (token: T) => string
  #pending: T[] = []
  #released = ''
  #cursor = 0

  /** `pieceOf` gives a token's own string (`decode([id])`, its `piece`). */
  constructor(pieceOf: (token: T) => string) {
    this.#pieceOf = pieceOf
  }

  /** A placer holding `tokens`, none placed yet (for `finish` to place at once). */
  static holding<T>(tokens: readonly T[], pieceOf: (token: T) => string): TokenPlacer<T> {
    const placer = new TokenPlacer(pieceOf)
    placer.#pending = [...tokens]
    return placer
  }

  /** Add the next token and the text released with it; returns the tokens whose place is now settled. */
  push(token: T, released: string): Placed<T>[] {
    this.#pending.push(token)
    this.#released += released
    return this.#place(this.#released, false)
  }

  /**
   * The choice ended with `text` as its whole output (the released text plus any held-back tail):
   * place every token not yet returned. `stopped`: it ended on a stop sequence, so trailing tokens
   * with no text in the output were cut off with it and are left out.
   */
  finish(text: string, stopped: boolean): Placed<T>[] {
    const placed = this.#place(text, true)
    if (stopped) while (placed.length > 0 && !placed[placed.length - 1]!.inText) placed.pop()
    return placed
  }

  #place(text: string, final: boolean): Placed<T>[] {
    const { aligned, end } = alignPieces(text, this.#cursor, this.#pending.map(this.#pieceOf), final)
    const placed = aligned.map((piece, i) => ({ ...piece, token: this.#pending[i]! }))
    this.#pending = this.#pending.slice(aligned.length)
    this.#cursor = end
    return placed
  }
}

/** Place a finished choice's tokens in its whole `text` at once (non-streamed responses). */
export function placeAll<T>(
  text: string,
  tokens: readonly T[],
  pieceOf: (token: T) => string,
  stopped: boolean,
): Placed<T>[] {
  return TokenPlacer.holding(tokens, pieceOf).finish(text, stopped)
}
