/**
 * Builds a small byte-level BPE tokenizer (the GPT-2 / Llama 3 family of formats) that
 * `@huggingface/tokenizers` loads: the 256 byte tokens, merges learned deterministically from a
 * fixed English sample, and chat special tokens as added tokens. Every UTF-8 string round-trips,
 * because any byte is a token.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/** The special tokens every built tokenizer has, in id order after the BPE vocabulary. */
export const TESTKIT_SPECIAL_TOKENS = ['<|bos|>', '<|eos|>', '<|system|>', '<|user|>', '<|assistant|>'] as const

/**
 * The default chat template: `<|bos|>` then, per message, `<|role|>\n{content}<|eos|>\n`, then
 * `<|assistant|>\n` when a generation prompt is asked for. It contains `bos_token` itself (like
 * Llama 3's), so a rendered chat is encoded with `addSpecialTokens: false`.
 */
export const TESTKIT_CHAT_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{% if message['role'] not in ['system', 'user', 'assistant'] %}" +
  "{{ raise_exception('Unknown role: ' + message['role']) }}{% endif %}" +
  "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"

/** Fixed training text: the merges (and so every token id) depend only on this and `numMerges`. */
const SAMPLE_TEXT = `The quick brown fox jumps over the lazy dog. A language model reads tokens and predicts the
next token. The server batches requests that use different adapters together, and each adapter
changes the weights of the model a little. Tokens are pieces of words: the, and, of, to, in, is, that,
for, with, on, as, at, by, this, from, or, an, be, are, was, were, has, have, had, not, but, what, all,
when, there, can, will, one, each, which, their, time, about, would, these, other, into, more, some.
Hello world! Hello, how are you today? I am fine, thank you. Please tell me a story about a cat who
lives in a small house near the river. Once upon a time there was a little cat. It liked to sleep in
the sun and to watch the water. Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14. Code: function add(a, b)
{ return a + b; } const x = [1, 2, 3]; print("hello"); if (x > 0) { y = x * 2 }. Questions and answers,
requests and responses, streams and events. The weather is nice and the sky is blue. We are testing
the tokenizer, the template, the sampler and the stop sequences. The end.`

/** GPT-2's reversible byte ↔ printable-character map used by the ByteLevel pre-tokenizer. */
export function bytesToUnicode(): string[] {
  const printable: number[] = []
  for (let b = 33; b <= 126; b++) printable.push(b)
  for (let b = 161; b <= 172; b++) printable.push(b)
  for (let b = 174; b <= 255; b++) printable.push(b)
  const map = new Array<string>(256)
  let extra = 0
  for (let b = 0; b < 256; b++) {
    map[b] = printable.includes(b) ? String.fromCharCode(b) : String.fromCharCode(256 + extra++)
  }
  return map
}

// The ByteLevel pre-tokenizer's split (GPT-2 regex), so training sees the words encoding will see.
const PRE_TOKENIZE = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu

function trainMerges(numMerges: number): [string, string][] {
  const byteChar = bytesToUnicode()
  const encoder = new TextEncoder()
  const wordCounts = new Map<string, number>()
  for (const word of SAMPLE_TEXT.match(PRE_TOKENIZE) ?? []) {
    const symbols = Array.from(encoder.encode(word), (b) => byteChar[b]!).join('\u0000')
    wordCounts.set(symbols, (wordCounts.get(symbols) ?? 0) + 1)
  }
  let words = [...wordCounts.entries()].map(([w, count]) => ({ symbols: w.split('\u0000'), count }))
  const merges: [string, string][] = []
  while (merges.length < numMerges) {
    const pairCounts = new Map<string, number>()
    for (const { symbols, count } of words) {
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = `${symbols[i]}\u0000${symbols[i + 1]}`
        pairCounts.set(key, (pairCounts.get(key) ?? 0) + count)
      }
    }
    let best: string | null = null
    let bestCount = 0
    for (const [key, count] of pairCounts) {
      // Ties break on the pair text so training is deterministic regardless of Map order.
      if (count > bestCount || (count === bestCount && best !== null && key < best)) {
        best = key
        bestCount = count
      }
    }
    if (best === null) break
    const [left, right] = best.split('\u0000') as [string, string]
    merges.push([left, right])
    words = words.map(({ symbols, count }) => {
      const out: string[] = []
      for (let i = 0; i < symbols.length; i++) {
        if (i + 1 < symbols.length && symbols[i] === left && symbols[i + 1] === right) {
          out.push(left + right)
          i++
        } else out.push(symbols[i]!)
      }
      return { symbols: out, count }
    })
  }
  return merges
}

/** Options for `buildTokenizer` / `writeTokenizer`. */
export interface TokenizerBuildOptions {
  /** BPE merges to learn from the sample text (fewer if the sample runs out). Default 300. */
  readonly numMerges?: number
  /** Whether the post-processor prepends `<|bos|>` when encoding with special tokens. Default true. */
  readonly addBosToken?: boolean
  /** Chat template to store; `null` stores none. Default `TESTKIT_CHAT_TEMPLATE`. */
  readonly chatTemplate?: string | null
  /** Store the template as `[{name: 'default', template}, {name: 'tool_use', …}]`, as some repos do. */
  readonly chatTemplateAsList?: boolean
  /** More special added tokens, appended after the standard ones (e.g. `<|tool|>`). */
  readonly extraSpecialTokens?: readonly string[]
}

/** Facts about a built tokenizer. */
export interface TokenizerInfo {
  /** Total ids, added tokens included. */
  readonly vocabSize: number
  readonly bosToken: string
  readonly eosToken: string
  readonly bosTokenId: number
  readonly eosTokenId: number
  /** Id of every special token by content. */
  readonly specialTokenIds: Readonly<Record<string, number>>
  readonly chatTemplate: string | null
}

/** The two JSON files of a tokenizer, as objects, plus facts about it. */
export interface BuiltTokenizer {
  readonly tokenizerJson: Record<string, unknown>
  readonly tokenizerConfig: Record<string, unknown>
  readonly info: TokenizerInfo
}

const mergesCache = new Map<number, [string, string][]>()

/** Build `tokenizer.json` and `tokenizer_config.json` contents in memory. */
export function buildTokenizer(opts: TokenizerBuildOptions = {}): BuiltTokenizer {
  const numMerges = opts.numMerges ?? 300
  let merges = mergesCache.get(numMerges)
  if (merges === undefined) {
    merges = trainMerges(numMerges)
    mergesCache.set(numMerges, merges)
  }
  const vocab: Record<string, number> = {}
  let next = 0
  for (const ch of bytesToUnicode()) vocab[ch] = next++ // id of a byte token = the byte's value
  for (const [a, b] of merges) if (vocab[a + b] === undefined) vocab[a + b] = next++

  const specials = [...TESTKIT_SPECIAL_TOKENS, ...(opts.extraSpecialTokens ?? [])]
  const specialTokenIds: Record<string, number> = {}
  const addedTokens = specials.map((content) => {
    specialTokenIds[content] = next
    return { id: next++, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }
  })
  const bosToken = '<|bos|>'
  const eosToken = '<|eos|>'
  const bosTokenId = specialTokenIds[bosToken]!
  const eosTokenId = specialTokenIds[eosToken]!
  const addBos = opts.addBosToken ?? true

  const postProcessor = addBos
    ? {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: bosToken, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [
          { SpecialToken: { id: bosToken, type_id: 0 } },
          { Sequence: { id: 'A', type_id: 0 } },
          { SpecialToken: { id: bosToken, type_id: 1 } },
          { Sequence: { id: 'B', type_id: 1 } },
        ],
        special_tokens: { [bosToken]: { id: bosToken, ids: [bosTokenId], tokens: [bosToken] } },
      }
    : { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true }

  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: postProcessor,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: merges.map(([a, b]) => `${a} ${b}`),
    },
  }

  const chatTemplate = opts.chatTemplate === undefined ? TESTKIT_CHAT_TEMPLATE : opts.chatTemplate
  const addedTokensDecoder: Record<string, unknown> = {}
  for (const { id, ...rest } of addedTokens) addedTokensDecoder[String(id)] = rest
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: addBos,
    add_eos_token: false,
    added_tokens_decoder: addedTokensDecoder,
    bos_token: bosToken,
    eos_token: eosToken,
    pad_token: null,
    clean_up_tokenization_spaces: false,
    model_max_length: 1_000_000,
    tokenizer_class: 'PreTrainedTokenizerFast',
  }
  if (chatTemplate !== null) {
    tokenizerConfig.chat_template = opts.chatTemplateAsList
      ? [
          { name: 'default', template: chatTemplate },
          { name: 'tool_use', template: chatTemplate },
        ]
      : chatTemplate
  }
  return {
    tokenizerJson,
    tokenizerConfig,
    info: { vocabSize: next, bosToken, eosToken, bosTokenId, eosTokenId, specialTokenIds, chatTemplate },
  }
}

/** Write `tokenizer.json` and `tokenizer_config.json` into `dir` (created if missing). */
export function writeTokenizer(dir: string, opts: TokenizerBuildOptions = {}): TokenizerInfo {
  const built = buildTokenizer(opts)
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(built.tokenizerJson, null, 2))
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(built.tokenizerConfig, null, 2))
  return built.info
}
