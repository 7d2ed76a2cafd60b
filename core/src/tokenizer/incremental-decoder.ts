/**
 * Streaming detokenization with the prefix-offset technique of text-generation-inference: decode a
 * window made of the last emitted tokens plus the pending ones, and emit only what the new tokens
 * added beyond the window's already-emitted prefix. Decoding the window (not tokens one by one)
 * keeps decoders that look at neighbours right (SentencePiece's leading-space strip, byte-fallback
 * fusion), and text ending in U+FFFD is held back because the next token may complete the
 * character.
 */
import type { IncrementalDecoder } from '../contracts/tokenizer.ts'

/** Decode a list of ids to text (the tokenizer's `decode` with the options fixed). */
export type DecodeFn = (ids: readonly number[]) => string

const REPLACEMENT = '\uFFFD'

export class PrefixOffsetDecoder implements IncrementalDecoder {
  private readonly decode: DecodeFn
  private readonly ids: number[] = []
  /** Start of the decode window: the first token of the last emitted chunk. */
  private prefixOffset = 0
  /** End of what has been emitted. */
  private readOffset = 0

  constructor(decode: DecodeFn) {
    this.decode = decode
  }

  push(id: number): string {
    this.ids.push(id)
    const prefixText = this.decode(this.ids.slice(this.prefixOffset, this.readOffset))
    const newText = this.decode(this.ids.slice(this.prefixOffset))
    // Emit only when the new tokens added stable text: longer than the prefix, not ending in a
    // possibly incomplete character, and extending (not rewriting) what was already emitted.
    if (newText.length > prefixText.length && !newText.endsWith(REPLACEMENT) && newText.startsWith(prefixText)) {
      this.prefixOffset = this.readOffset
      this.readOffset = this.ids.length
      return newText.slice(prefixText.length)
    }
    return ''
  }

  flush(): string {
    if (this.readOffset === this.ids.length) return ''
    const prefixText = this.decode(this.ids.slice(this.prefixOffset, this.readOffset))
    const newText = this.decode(this.ids.slice(this.prefixOffset))
    this.prefixOffset = this.readOffset = this.ids.length
    // What was emitted is final; emit what the window adds past the part it shares with it.
    let common = 0
    while (common < prefixText.length && common < newText.length && prefixText[common] === newText[common]) common++
    return newText.slice(common)
  }
}
