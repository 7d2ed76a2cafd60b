/**
 * The vocabulary XGrammar needs, read from a Hugging Face `tokenizer.json`: every token's raw
 * string in id order plus how those strings encode bytes. XGrammar decodes each string itself
 * (byte-level `Ġ` → space, byte-fallback `<0x0A>` → newline) to learn which text each token adds.
 */
import { byteLevelAlphabet } from '../tokenizer/byte-level-alphabet.ts'

/** How token strings map to bytes (XGrammar's `VocabType`). */
export type XGrammarVocabType = 'byte_level' | 'byte_fallback' | 'raw'

/** The inputs of XGrammar's `TokenizerInfo.createTokenizerInfo`. */
export interface XGrammarVocabulary {
  /** Token strings by id; `''` for ids that must never be generated inside a grammar. */
  readonly encodedVocab: string[]
  readonly vocabType: XGrammarVocabType
  /** Whether the tokenizer prepends a space to the text (SentencePiece's `▁` prefix). */
  readonly prependSpace: boolean
}

type Json = Record<string, unknown>

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v)

/** The component and, for a `Sequence`, its members, flattened. */
function components(node: unknown): Json[] {
  if (!isObject(node)) return []
  const inner = node.decoders ?? node.normalizers ?? node.pretokenizers
  return Array.isArray(inner) ? inner.flatMap(components) : [node]
}

const hasType = (node: unknown, type: string): boolean => components(node).some((c) => c.type === type)

/**
 * Bytes that appear in no valid UTF-8 text. XGrammar 0.1.27 reads a lead byte C0/C1 as the start
 * of a (forbidden, overlong) two-byte character, so `C0 87` would pass as a character and decode
 * to U+FFFD twice; tokens holding these bytes are never allowed.
 */
function neverInUtf8(byte: number): boolean {
  return byte === 0xc0 || byte === 0xc1 || byte >= 0xf5
}

function vocabTypeOf(json: Json): XGrammarVocabType {
  const model = isObject(json.model) ? json.model : {}
  if (hasType(json.decoder, 'ByteFallback') || model.byte_fallback === true) return 'byte_fallback'
  if (hasType(json.decoder, 'ByteLevel') || hasType(json.pre_tokenizer, 'ByteLevel')) return 'byte_level'
  return 'raw'
}

/** SentencePiece-style tokenizers prepend `▁` through a normalizer or the Metaspace pre-tokenizer. */
function prependsSpace(json: Json): boolean {
  if (components(json.normalizer).some((c) => c.type === 'Prepend' && c.prepend === '\u2581')) return true
  return components(json.pre_tokenizer).some(
    (c) =>
      c.type === 'Metaspace' &&
      (c.prepend_scheme === 'always' || c.prepend_scheme === 'first' || c.add_prefix_space === true),
  )
}

/**
 * Build XGrammar's vocabulary from a parsed `tokenizer.json` (BPE, WordPiece or Unigram model).
 * Special added tokens become `''`, which XGrammar never allows inside a grammar (their text is
 * dropped on decode, so allowing them would let the output differ from what the grammar
 * matched); stop tokens are passed to XGrammar separately. So do tokens holding a byte that
 * never occurs in UTF-8. Non-special added tokens are stored raw in `tokenizer.json`, so they are
 * re-encoded into the model's byte alphabet.
 */
export function vocabularyFromTokenizerJson(tokenizerJson: object): XGrammarVocabulary {
  const json = tokenizerJson as Json
  const model = isObject(json.model) ? json.model : {}
  const vocabType = vocabTypeOf(json)
  const metaspaceOnly = vocabType === 'raw' && hasType(json.decoder, 'Metaspace')
  const byId = new Map<number, string>()
  if (Array.isArray(model.vocab)) {
    // Unigram: [[piece, score], …] in id order.
    model.vocab.forEach((entry, id) => {
      if (Array.isArray(entry) && typeof entry[0] === 'string') byId.set(id, entry[0])
    })
  } else if (isObject(model.vocab)) {
    for (const [token, id] of Object.entries(model.vocab)) if (typeof id === 'number') byId.set(id, token)
  }
  if (metaspaceOnly) {
    // XGrammar's raw type takes strings as the text they add; Metaspace's `▁` is a space.
    for (const [id, token] of byId) byId.set(id, token.replaceAll('\u2581', ' '))
  }
  const alphabet = vocabType === 'byte_level' ? byteLevelAlphabet() : null
  const encoder = new TextEncoder()
  for (const added of Array.isArray(json.added_tokens) ? json.added_tokens : []) {
    if (!isObject(added) || typeof added.id !== 'number' || typeof added.content !== 'string') continue
    if (added.special === true) byId.set(added.id, '')
    else if (alphabet !== null) {
      byId.set(added.id, Array.from(encoder.encode(added.content), (b) => alphabet[b]!).join(''))
    } else if (vocabType === 'byte_fallback') byId.set(added.id, added.content.replaceAll(' ', '\u2581'))
    else byId.set(added.id, added.content)
  }
  if (alphabet !== null) {
    const byteOf = new Map(alphabet.map((ch, b) => [ch, b]))
    for (const [id, token] of byId) {
      for (const ch of token) if (neverInUtf8(byteOf.get(ch) ?? 0)) byId.set(id, '')
    }
  } else if (vocabType === 'byte_fallback') {
    for (const [id, token] of byId) {
      const byte = /^<0x([0-9A-Fa-f]{2})>$/.exec(token)
      if (byte !== null && neverInUtf8(parseInt(byte[1]!, 16))) byId.set(id, '')
    }
  }
  let size = 0
  for (const id of byId.keys()) if (id + 1 > size) size = id + 1
  const encodedVocab = new Array<string>(size).fill('')
  for (const [id, token] of byId) if (id >= 0) encodedVocab[id] = token
  return { encodedVocab, vocabType, prependSpace: prependsSpace(json) }
}
