/**
 * Text ↔ token ids for one model (the base model, or an adapter that ships its own tokenizer).
 * The default implementation reads `tokenizer.json` + `tokenizer_config.json` with
 * `@huggingface/tokenizers`.
 */
export interface Tokenizer {
  readonly vocabSize: number
  /** `bos_token` string from `tokenizer_config.json`, if any (templates need it). */
  readonly bosToken: string | null
  /** `eos_token` string from `tokenizer_config.json`, if any. */
  readonly eosToken: string | null
  /** `chat_template` from `tokenizer_config.json` (the `default` entry when it is a list), if any. */
  readonly chatTemplate: string | null
  /** Encode text; `addSpecialTokens` adds BOS/EOS as the tokenizer's post-processor says. */
  encode(text: string, options: { addSpecialTokens: boolean }): number[]
  /** Decode ids; `skipSpecialTokens` drops added special tokens. */
  decode(ids: readonly number[], options: { skipSpecialTokens: boolean }): string
  /** Whether `id` is a special (added) token such as `<|eot|>`. */
  isSpecial(id: number): boolean
  /** A fresh streaming decoder for one sequence. */
  createDecoder(options: { skipSpecialTokens: boolean }): IncrementalDecoder
}

/**
 * Turns a growing list of ids into text deltas. Never emits half of a UTF-8 character or of a
 * merged byte sequence: text is held back until it is stable.
 */
export interface IncrementalDecoder {
  /** Append one token id and return the newly stable text (possibly empty). */
  push(id: number): string
  /** Return whatever text is still held back (at the end of generation). */
  flush(): string
}

/** Loads a `Tokenizer` from a directory holding `tokenizer.json` (and optionally `tokenizer_config.json`). */
export interface TokenizerLoader {
  /** Returns null when `dir` has no `tokenizer.json`; throws `tokenizer_invalid` when it is unreadable. */
  load(dir: string): Promise<Tokenizer | null>
}

/** Injection token for the `TokenizerLoader`. */
export const TokenizerLoader: unique symbol = Symbol('TokenizerLoader')
/** Injection token for the base model's `Tokenizer` (registered once the model directory is known). */
export const Tokenizer: unique symbol = Symbol('Tokenizer')
