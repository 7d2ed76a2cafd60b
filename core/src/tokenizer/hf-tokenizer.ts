/**
 * The default `Tokenizer`: `tokenizer.json` run by `@huggingface/tokenizers`, plus the BOS/EOS
 * strings and chat template from `tokenizer_config.json`.
 */
import { Tokenizer as HfTokenizerModel } from '@huggingface/tokenizers'
import type { IncrementalDecoder, Tokenizer } from '../contracts/tokenizer.ts'
import { ByteLevelVocabulary } from './byte-level-decoder.ts'
import { PrefixOffsetDecoder } from './incremental-decoder.ts'
import type { TokenizerSettings } from './tokenizer-config.ts'

export class HfTokenizer implements Tokenizer {
  readonly vocabSize: number
  readonly bosToken: string | null
  readonly eosToken: string | null
  readonly chatTemplate: string | null
  private readonly model: HfTokenizerModel
  private readonly specialIds: ReadonlySet<number>
  private readonly tokenizerJson: Readonly<Record<string, unknown>>
  private readonly tokenizerConfig: Readonly<Record<string, unknown>>
  /** Built on the first `createDecoder`; null when the decoder is not plain byte-level. */
  private byteLevel: ByteLevelVocabulary | null | undefined
  /**
   * One id's text, per `skipSpecialTokens` (index 0: false, 1: true), memoised: the server decodes
   * every generated token and its alternatives alone (a token's `piece`, `top` entries).
   */
  private readonly singleIdText: [Map<number, string>, Map<number, string>] = [new Map(), new Map()]

  /**
   * @param tokenizerJson parsed `tokenizer.json`
   * @param tokenizerConfig parsed `tokenizer_config.json` (`{}` when absent)
   */
  constructor(
    tokenizerJson: Readonly<Record<string, unknown>>,
    tokenizerConfig: Readonly<Record<string, unknown>>,
    settings: TokenizerSettings,
  ) {
    this.tokenizerJson = tokenizerJson
    this.tokenizerConfig = tokenizerConfig
    this.model = new HfTokenizerModel(tokenizerJson, tokenizerConfig)
    this.bosToken = settings.bosToken
    this.eosToken = settings.eosToken
    this.chatTemplate = settings.chatTemplate
    let maxId = -1
    for (const id of this.model.get_vocab(true).values()) if (id > maxId) maxId = id
    this.vocabSize = maxId + 1
    const special = new Set<number>()
    for (const [id, token] of this.model.get_added_tokens_decoder()) if (token.special) special.add(id)
    // Tokens listed only in `additional_special_tokens` are skipped on decode too, so count them.
    const extra = tokenizerConfig.additional_special_tokens
    if (Array.isArray(extra)) {
      for (const entry of extra) {
        const content = typeof entry === 'string' ? entry : (entry as { content?: unknown } | null)?.content
        const id = typeof content === 'string' ? this.model.token_to_id(content) : undefined
        if (id !== undefined) special.add(id)
      }
    }
    this.specialIds = special
  }

  encode(text: string, options: { addSpecialTokens: boolean }): number[] {
    return this.model.encode(text, { add_special_tokens: options.addSpecialTokens }).ids
  }

  decode(ids: readonly number[], options: { skipSpecialTokens: boolean }): string {
    if (ids.length !== 1) return this.decodeMany(ids, options)
    const id = ids[0] as number
    const memo = this.singleIdText[options.skipSpecialTokens ? 1 : 0]
    let text = memo.get(id)
    if (text === undefined) {
      text = this.decodeMany(ids, options)
      // Only ids of the vocabulary are kept, so a client cannot grow the memo without bound.
      if (Number.isInteger(id) && id >= 0 && id < this.vocabSize) memo.set(id, text)
    }
    return text
  }

  private decodeMany(ids: readonly number[], options: { skipSpecialTokens: boolean }): string {
    // Ids the tokenizer does not know (a model's padded vocabulary rows) decode to nothing, as in
    // the Rust tokenizers; the JS library would print them as "undefined" or throw on an empty list.
    const known = ids.filter((id) => this.model.id_to_token(id) !== undefined)
    if (known.length === 0) return ''
    // Never clean up tokenization spaces: it rewrites text across token boundaries (" ," → ","),
    // which breaks streaming, and text-generation-inference does not do it either.
    return this.model.decode(known, {
      skip_special_tokens: options.skipSpecialTokens,
      clean_up_tokenization_spaces: false,
    })
  }

  isSpecial(id: number): boolean {
    return this.specialIds.has(id)
  }

  createDecoder(options: { skipSpecialTokens: boolean }): IncrementalDecoder {
    if (this.byteLevel === undefined) {
      this.byteLevel = ByteLevelVocabulary.build({
        tokenizerJson: this.tokenizerJson,
        tokenizerConfig: this.tokenizerConfig,
        vocabSize: this.vocabSize,
        tokenOf: (id) => this.model.id_to_token(id),
        decode: (ids, decodeOptions) => this.decodeMany(ids, decodeOptions),
      })
    }
    if (this.byteLevel) return this.byteLevel.createDecoder(options)
    return new PrefixOffsetDecoder((ids) => this.decode(ids, options))
  }

  /** The id of a token string (e.g. `<|eot_id|>`), if the vocabulary has it. */
  tokenToId(token: string): number | undefined {
    return this.model.token_to_id(token)
  }
}
