import t from 'tap'
import { writeFileSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { writeTokenizer, buildTokenizer, SeededRandom, TESTKIT_CHAT_TEMPLATE } from '@loom/testkit'
import { HfTokenizerLoader, PrefixOffsetDecoder } from '../../src/tokenizer/index.ts'
import { ByteLevelVocabulary, type ByteLevelSource } from '../../src/tokenizer/byte-level-decoder.ts'
import { LoomError } from '../../src/errors/index.ts'
import type { Tokenizer } from '../../src/contracts/tokenizer.ts'

const loader = new HfTokenizerLoader()

async function load(dir: string): Promise<Tokenizer> {
  const tok = await loader.load(dir)
  if (tok === null) throw new Error('no tokenizer')
  return tok
}

function stream(
  tok: Tokenizer,
  ids: readonly number[],
  skipSpecialTokens: boolean,
): { pieces: string[]; text: string } {
  const decoder = tok.createDecoder({ skipSpecialTokens })
  const pieces = ids.map((id) => decoder.push(id))
  pieces.push(decoder.flush())
  return { pieces, text: pieces.join('') }
}

t.test('loader: null without tokenizer.json, tokenizer_invalid when unreadable', async (t) => {
  const dir = t.testdir({ empty: {}, broken: { 'tokenizer.json': '{not json' }, weird: { 'tokenizer.json': '[]' } })
  t.equal(await loader.load(join(dir, 'empty')), null)
  for (const name of ['broken', 'weird']) {
    const err = await loader.load(join(dir, name)).catch((e: unknown) => e)
    t.ok(err instanceof LoomError && err.code === 'tokenizer_invalid' && err.message.includes(name), String(err))
  }
  const bad = t.testdir()
  const { tokenizerJson } = buildTokenizer()
  writeFileSync(join(bad, 'tokenizer.json'), JSON.stringify({ ...tokenizerJson, decoder: { type: 'NoSuchDecoder' } }))
  await t.rejects(loader.load(bad), { code: 'tokenizer_invalid' })
})

t.test('settings: bos/eos (strings or AddedToken objects) and chat templates in every stored form', async (t) => {
  const dir = t.testdir()
  writeTokenizer(dir)
  let tok = await load(dir)
  t.equal(tok.bosToken, '<|bos|>')
  t.equal(tok.eosToken, '<|eos|>')
  t.equal(tok.chatTemplate, TESTKIT_CHAT_TEMPLATE)

  writeTokenizer(dir, { chatTemplateAsList: true })
  tok = await load(dir)
  t.equal(tok.chatTemplate, TESTKIT_CHAT_TEMPLATE, 'list form: the default entry')

  const configPath = join(dir, 'tokenizer_config.json')
  const config = JSON.parse(readFileSync(configPath, 'utf8'))
  config.bos_token = { __type: 'AddedToken', content: '<|bos|>', lstrip: false }
  config.chat_template = [{ name: 'tool_use', template: 'x' }]
  writeFileSync(configPath, JSON.stringify(config))
  tok = await load(dir)
  t.equal(tok.bosToken, '<|bos|>')
  t.equal(tok.chatTemplate, null, 'a list without default')

  delete config.chat_template
  writeFileSync(configPath, JSON.stringify(config))
  writeFileSync(join(dir, 'chat_template.jinja'), '{{ messages[0].content }}')
  tok = await load(dir)
  t.equal(tok.chatTemplate, '{{ messages[0].content }}', 'chat_template.jinja')

  const bare = t.testdir()
  writeFileSync(join(bare, 'tokenizer.json'), JSON.stringify(buildTokenizer().tokenizerJson))
  tok = await load(bare)
  t.equal(tok.bosToken, null)
  t.equal(tok.chatTemplate, null)
})

t.test('encode, decode, special tokens', async (t) => {
  const dir = t.testdir()
  const info = writeTokenizer(dir)
  const tok = await load(dir)
  t.equal(tok.vocabSize, info.vocabSize)
  const ids = tok.encode('Hello world<|eos|>', { addSpecialTokens: true })
  t.equal(ids[0], info.bosTokenId)
  t.equal(ids.at(-1), info.eosTokenId)
  t.notOk(tok.encode('Hello', { addSpecialTokens: false }).includes(info.bosTokenId))
  t.equal(tok.decode(ids, { skipSpecialTokens: false }), '<|bos|>Hello world<|eos|>')
  t.equal(tok.decode(ids, { skipSpecialTokens: true }), 'Hello world')
  t.ok(tok.isSpecial(info.eosTokenId))
  t.ok(tok.isSpecial(info.specialTokenIds['<|assistant|>']!))
  t.notOk(tok.isSpecial(ids[1]!))
  t.equal(tok.decode([], { skipSpecialTokens: false }), '')
  t.equal(
    tok.decode([info.vocabSize + 5], { skipSpecialTokens: false }),
    '',
    'ids past the tokenizer decode to nothing',
  )
  t.equal(
    tok.decode(tok.encode('a , b', { addSpecialTokens: false }), { skipSpecialTokens: true }),
    'a , b',
    'no space clean-up',
  )
})

t.test('streaming never splits a UTF-8 character (emoji, CJK across byte tokens)', async (t) => {
  const dir = t.testdir()
  writeTokenizer(dir)
  const tok = await load(dir)
  // Byte tokens have id = byte value in the test kit's tokenizer.
  const emoji = [...new TextEncoder().encode('😀')]
  t.same(stream(tok, emoji, false).pieces, ['', '', '', '😀', ''])
  const cjk = tok.encode('日本語 ok', { addSpecialTokens: false })
  const { pieces, text } = stream(tok, cjk, false)
  t.equal(text, '日本語 ok')
  for (const p of pieces) t.notOk(p.includes('\uFFFD'), JSON.stringify(p))
  t.same(pieces.filter((p) => p !== '').slice(0, 3), ['日', '本', '語'])
  // A byte that cannot start a character is U+FFFD at once (the byte-level decoder knows it can
  // never complete); an incomplete lead sequence is held until the end.
  t.same(stream(tok, [0x80, 0x61], false).pieces, ['\uFFFD', 'a', ''])
  t.same(stream(tok, [0xf0, 0x9f], false).pieces, ['', '', '\uFFFD'])
})

t.test('streaming equals full decode for random token sequences', async (t) => {
  const dir = t.testdir()
  const info = writeTokenizer(dir)
  const tok = await load(dir)
  const rng = new SeededRandom(11)
  const mismatches: string[] = []
  for (let trial = 0; trial < 300; trial++) {
    const n = 1 + rng.int(40)
    const ids = Array.from({ length: n }, () => {
      const r = rng.next()
      // Mix continuation/lead bytes (to split characters), merged tokens and specials.
      if (r < 0.4) return 0x80 + rng.int(0x80)
      if (r < 0.9) return rng.int(info.vocabSize - 5)
      return info.vocabSize - 5 + rng.int(5)
    })
    for (const skip of [false, true]) {
      const streamed = stream(tok, ids, skip).text
      const full = tok.decode(ids, { skipSpecialTokens: skip })
      if (streamed !== full)
        mismatches.push(`${JSON.stringify(ids)} skip=${skip}: ${JSON.stringify(streamed)} vs ${JSON.stringify(full)}`)
    }
  }
  t.same(mismatches, [])
  const text = 'Ünïcödé ✓ — 中文字符 and 🇫🇷 flags 👍🏽!'
  const ids = tok.encode(text, { addSpecialTokens: false })
  t.equal(stream(tok, ids, true).text, text)
})

t.test('SentencePiece-style tokenizer (Metaspace, byte fallback, leading-space strip) streams correctly', async (t) => {
  const dir = t.testdir()
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1, '</s>': 2 }
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b
  const words = [
    '▁',
    'H',
    'e',
    'l',
    'o',
    'w',
    'r',
    'd',
    '▁H',
    'el',
    'lo',
    '▁w',
    'or',
    'ld',
    '▁Hel',
    '▁Hello',
    '▁wor',
    '▁world',
  ]
  for (const w of words) vocab[w] = Object.keys(vocab).length
  const tokenizerJson = {
    version: '1.0',
    added_tokens: [
      { id: 0, content: '<unk>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false },
      { id: 1, content: '<s>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false },
      { id: 2, content: '</s>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false },
    ],
    normalizer: {
      type: 'Sequence',
      normalizers: [
        { type: 'Prepend', prepend: '▁' },
        { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
      ],
    },
    pre_tokenizer: null,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
    },
    decoder: {
      type: 'Sequence',
      decoders: [
        { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
        { type: 'ByteFallback' },
        { type: 'Fuse' },
        { type: 'Strip', content: ' ', start: 1, stop: 0 },
      ],
    },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: '<unk>',
      byte_fallback: true,
      fuse_unk: true,
      vocab,
      merges: ['▁ H', 'e l', 'l o', '▁ w', 'o r', 'l d', '▁H el', '▁Hel lo', '▁w or', '▁wor ld'],
    },
  }
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tokenizerJson))
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ bos_token: '<s>', eos_token: '</s>' }))
  const tok = await load(dir)
  const text = 'Hello world 😀 héllo'
  const ids = tok.encode(text, { addSpecialTokens: false })
  t.equal(tok.decode(ids, { skipSpecialTokens: true }), text)
  t.ok(ids.includes(vocab['<0xF0>']!), 'the emoji goes through byte fallback')
  const { pieces, text: streamed } = stream(tok, ids, true)
  t.equal(streamed, text)
  t.equal(pieces[0], 'Hello', 'the first piece has its leading space stripped, as in a full decode')
  t.equal(pieces[1], ' world', 'later pieces keep theirs')
  for (const p of pieces) t.notOk(p.includes('\uFFFD'), JSON.stringify(p))
  t.equal(stream(tok, [1, ...ids, 2], true).text, text)
})

/** The byte-level table's inputs for a test-kit tokenizer, decoding through `tok`. */
function byteLevelSource(dir: string, tok: Tokenizer & { tokenToId?: unknown }): ByteLevelSource {
  const tokenizerJson = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'))
  const vocab = new Map<number, string>()
  for (const [token, id] of Object.entries(tokenizerJson.model.vocab as Record<string, number>)) vocab.set(id, token)
  for (const added of tokenizerJson.added_tokens as { id: number; content: string }[])
    vocab.set(added.id, added.content)
  return {
    tokenizerJson,
    tokenizerConfig: JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')),
    vocabSize: tok.vocabSize,
    tokenOf: (id) => vocab.get(id),
    decode: (ids, options) => tok.decode(ids, options),
  }
}

t.test('byte-level decoder: streams what the prefix-offset decoder streams, in the same total text', async (t) => {
  const dir = t.testdir()
  const info = writeTokenizer(dir)
  const tok = await load(dir)
  const vocabulary = ByteLevelVocabulary.build(byteLevelSource(dir, tok))
  if (vocabulary === null) throw new Error('the test kit tokenizer is byte-level: the table must build')
  const rng = new SeededRandom(23)
  const mismatches: string[] = []
  for (let trial = 0; trial < 200; trial++) {
    const ids = Array.from({ length: 1 + rng.int(30) }, () =>
      rng.next() < 0.3 ? 0x80 + rng.int(0x80) : rng.int(info.vocabSize),
    )
    for (const skipSpecialTokens of [false, true]) {
      const fast = vocabulary.createDecoder({ skipSpecialTokens })
      const general = new PrefixOffsetDecoder((window) => tok.decode(window, { skipSpecialTokens }))
      let fastText = ''
      let generalText = ''
      for (const id of ids) {
        fastText += fast.push(id)
        generalText += general.push(id)
      }
      fastText += fast.flush()
      generalText += general.flush()
      if (fastText !== generalText) mismatches.push(`${JSON.stringify(ids)} skip=${skipSpecialTokens}`)
    }
  }
  t.same(mismatches, [])
  // Added tokens end the byte run before them: a lead byte then <|eos|> is U+FFFD, then the text.
  const eos = info.eosTokenId
  const d = vocabulary.createDecoder({ skipSpecialTokens: false })
  t.same([d.push(0xe6), d.push(eos), d.flush()], ['', '\uFFFD<|eos|>', ''])
  const skipping = vocabulary.createDecoder({ skipSpecialTokens: true })
  t.same(
    [0xe6, eos, 0x97, 0xa5].map((id) => skipping.push(id)),
    ['', '', '', '日'],
    'a skipped special token leaves the byte run whole, as the tokenizer drops it before decoding',
  )
  t.same([d.push(info.vocabSize + 3), d.push(-1), d.push(0.5)], ['', '', ''], 'ids outside the vocabulary add nothing')
})

t.test(
  'byte-level decoder: refused for other decoders and whenever the table disagrees with the tokenizer',
  async (t) => {
    const dir = t.testdir()
    writeTokenizer(dir)
    const tok = await load(dir)
    const source = byteLevelSource(dir, tok)
    t.ok(ByteLevelVocabulary.build(source), 'the plain byte-level tokenizer builds')
    const sequence = { ...source.tokenizerJson, decoder: { type: 'Sequence', decoders: [{ type: 'ByteLevel' }] } }
    t.equal(ByteLevelVocabulary.build({ ...source, tokenizerJson: sequence }), null, 'a decoder sequence')
    const suffixed = {
      ...source.tokenizerJson,
      model: { ...(source.tokenizerJson.model as object), end_of_word_suffix: '</w>' },
    }
    t.equal(ByteLevelVocabulary.build({ ...source, tokenizerJson: suffixed }), null, 'an end-of-word suffix')
    const rewritten: ByteLevelSource = {
      ...source,
      decode: (ids, options) => source.decode(ids, options).replaceAll('e', 'E'),
    }
    t.equal(ByteLevelVocabulary.build(rewritten), null, 'a tokenizer decoding differently from the table')
    const specialByConfig: ByteLevelSource = {
      ...source,
      decode: (ids, options) => source.decode(ids, options),
      tokenizerConfig: { ...source.tokenizerConfig, additional_special_tokens: ['Hello'] },
    }
    t.equal(
      ByteLevelVocabulary.build(specialByConfig),
      null,
      'a config special token the reference does not skip (the check covers skipSpecialTokens too)',
    )
  },
)

t.test('single-id decodes are memoised per skip mode and stay exact', async (t) => {
  const dir = t.testdir()
  const info = writeTokenizer(dir)
  const tok = await load(dir)
  const eos = info.eosTokenId
  for (let round = 0; round < 2; round++) {
    t.equal(tok.decode([eos], { skipSpecialTokens: false }), '<|eos|>')
    t.equal(tok.decode([eos], { skipSpecialTokens: true }), '')
    t.equal(tok.decode([0xe6], { skipSpecialTokens: false }), '\uFFFD')
    t.equal(tok.decode([info.vocabSize + 1], { skipSpecialTokens: false }), '')
  }
})
