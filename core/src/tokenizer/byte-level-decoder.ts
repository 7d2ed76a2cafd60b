/**
 * Streaming detokenization for tokenizers whose decoder is GPT-2's byte-level one (GPT-2, Llama 3,
 * Qwen, SmolLM, the demo model). There a token stands for a fixed run of bytes, so a sequence's
 * text is the UTF-8 decoding of its tokens' bytes laid end to end, and an incremental decoder is a
 * streaming UTF-8 decoder fed one token's bytes at a time: a few hundred nanoseconds per token,
 * where the prefix-offset technique decodes a window of ids through the tokenizer twice.
 *
 * The byte table mirrors `@huggingface/tokenizers`' `ByteLevel` decoder exactly (added tokens are
 * verbatim text that ends the byte run before them, a character outside the byte map reads as byte
 * 0, skipped special tokens are matched by their text), and `ByteLevelVocabulary.build` checks it
 * against the library before it is used; any difference and the caller keeps the general decoder.
 */
import type { IncrementalDecoder } from '../contracts/tokenizer.ts'
import { byteLevelAlphabet } from './byte-level-alphabet.ts'

/** What `build` needs of the tokenizer: its parsed files and its own decode, to check against. */
export interface ByteLevelSource {
  /** Parsed `tokenizer.json`. */
  tokenizerJson: Readonly<Record<string, unknown>>
  /** Parsed `tokenizer_config.json` (`{}` when absent). */
  tokenizerConfig: Readonly<Record<string, unknown>>
  /** Ids are `0 .. vocabSize - 1`. */
  vocabSize: number
  /** The token string of an id (added tokens: their content), undefined for an unknown id. */
  tokenOf(id: number): string | undefined
  /** The tokenizer's decode, the reference the table must reproduce. */
  decode(ids: readonly number[], options: { skipSpecialTokens: boolean }): string
}

/** How an id decodes: a run of bytes, verbatim text, or nothing (an id the tokenizer lacks). */
const UNKNOWN = 0
const BYTES = 1
const ADDED = 2

/**
 * Ids checked against the library when the vocabulary is larger than this (a stride sample, plus
 * every added token): a table that reads the byte map or the added tokens wrongly is wrong on most
 * of them. Checking all of a 2,048-token vocabulary took ~50 ms; this many, ~10 ms.
 */
const CHECKED_IDS = 512

export class ByteLevelVocabulary {
  /** Per id, `UNKNOWN`, `BYTES` or `ADDED`. */
  private readonly kinds: Uint8Array
  /** Per id, 1 when `skipSpecialTokens` drops it. */
  private readonly special: Uint8Array
  /** Bytes of id `i` are `bytes[offsets[i] .. offsets[i + 1])`. */
  private readonly offsets: Int32Array
  private readonly bytes: Uint8Array
  /** Added tokens' text, by id. */
  private readonly added: ReadonlyMap<number, string>

  private constructor(
    kinds: Uint8Array,
    special: Uint8Array,
    offsets: Int32Array,
    bytes: Uint8Array,
    added: ReadonlyMap<number, string>,
  ) {
    this.kinds = kinds
    this.special = special
    this.offsets = offsets
    this.bytes = bytes
    this.added = added
  }

  /**
   * The byte table of a tokenizer whose decoder is plain `ByteLevel`, or null when it is not or
   * when the table decodes any checked id or sequence differently from `source.decode`.
   */
  static build(source: ByteLevelSource): ByteLevelVocabulary | null {
    const json = source.tokenizerJson
    const decoder = json.decoder as { type?: unknown } | null | undefined
    if (decoder?.type !== 'ByteLevel') return null
    // A model suffix (`</w>`) is turned into spaces after decoding; the table does not model that.
    const model = json.model as { end_of_word_suffix?: unknown } | null | undefined
    if (model?.end_of_word_suffix) return null

    const addedContents = new Set<string>()
    const specialContents = new Set<string>()
    for (const token of Array.isArray(json.added_tokens) ? json.added_tokens : []) {
      const { content, special } = token as { content?: unknown; special?: unknown }
      if (typeof content !== 'string') continue
      addedContents.add(content)
      if (special === true) specialContents.add(content)
    }
    // The library also skips `additional_special_tokens` given as strings (not as objects).
    const extra = source.tokenizerConfig.additional_special_tokens
    if (Array.isArray(extra)) for (const entry of extra) if (typeof entry === 'string') specialContents.add(entry)

    const table = new Map(byteLevelAlphabet().map((char, byte) => [char, byte]))
    const n = source.vocabSize
    const kinds = new Uint8Array(n)
    const special = new Uint8Array(n)
    const offsets = new Int32Array(n + 1)
    const added = new Map<number, string>()
    const runs: number[] = []
    for (let id = 0; id < n; id++) {
      offsets[id] = runs.length
      const token = source.tokenOf(id)
      if (token === undefined) continue
      if (specialContents.has(token)) special[id] = 1
      if (addedContents.has(token)) {
        kinds[id] = ADDED
        added.set(id, token)
        continue
      }
      kinds[id] = BYTES
      for (const char of token) runs.push(table.get(char) ?? 0)
    }
    offsets[n] = runs.length
    const vocabulary = new ByteLevelVocabulary(kinds, special, offsets, Uint8Array.from(runs), added)
    return vocabulary.agreesWith(source) ? vocabulary : null
  }

  /** A fresh streaming decoder for one sequence. */
  createDecoder(options: { skipSpecialTokens: boolean }): IncrementalDecoder {
    return new ByteLevelStreamDecoder(this, options.skipSpecialTokens)
  }

  /**
   * The piece of output id `id` contributes: a byte run, verbatim text, or nothing. The stream
   * decoder calls this per token, so it allocates only the subarray view.
   */
  pieceOf(id: number, skipSpecialTokens: boolean): Uint8Array | string | null {
    if (!Number.isInteger(id) || id < 0 || id >= this.kinds.length) return null
    const kind = this.kinds[id]
    if (kind === UNKNOWN || (skipSpecialTokens && this.special[id] === 1)) return null
    if (kind === ADDED) return this.added.get(id) ?? null
    return this.bytes.subarray(this.offsets[id], this.offsets[id + 1])
  }

  /** Whether every checked id, and sequences mixing them, decode as `source.decode` does. */
  private agreesWith(source: ByteLevelSource): boolean {
    const n = source.vocabSize
    const ids: number[] = []
    const stride = Math.max(1, Math.floor(n / CHECKED_IDS))
    for (let id = 0; id < n; id += stride) ids.push(id)
    for (const id of this.added.keys()) ids.push(id)
    for (const id of ids) {
      if (this.kinds[id] === UNKNOWN) continue
      if (!this.decodesAs(source, [id], false)) return false
    }
    // Sequences: consecutive sampled ids (byte runs that split and join characters, added tokens
    // cutting runs), in both skip modes.
    for (let start = 0; start < ids.length; start += 7) {
      const run = ids.slice(start, start + 9)
      if (!this.decodesAs(source, run, false) || !this.decodesAs(source, run, true)) return false
    }
    return true
  }

  private decodesAs(source: ByteLevelSource, ids: readonly number[], skipSpecialTokens: boolean): boolean {
    const stream = this.createDecoder({ skipSpecialTokens })
    let text = ''
    for (const id of ids) text += stream.push(id)
    text += stream.flush()
    return text === source.decode(ids, { skipSpecialTokens })
  }
}

/**
 * One sequence's decoder: bytes go through a streaming UTF-8 decoder, which holds back an
 * incomplete character until its next bytes arrive (or flush turns it into U+FFFD, as a whole
 * decode would). An added token first ends the byte run before it, as the library's decoder does.
 */
class ByteLevelStreamDecoder implements IncrementalDecoder {
  private readonly vocabulary: ByteLevelVocabulary
  private readonly skipSpecialTokens: boolean
  private readonly utf8 = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true })

  constructor(vocabulary: ByteLevelVocabulary, skipSpecialTokens: boolean) {
    this.vocabulary = vocabulary
    this.skipSpecialTokens = skipSpecialTokens
  }

  push(id: number): string {
    const piece = this.vocabulary.pieceOf(id, this.skipSpecialTokens)
    if (piece === null) return ''
    if (typeof piece === 'string') return this.utf8.decode() + piece
    return this.utf8.decode(piece, { stream: true })
  }

  flush(): string {
    return this.utf8.decode()
  }
}
