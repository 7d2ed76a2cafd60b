import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Tokenizer } from '@huggingface/tokenizers'
import { SeededRandom } from '../src/random.ts'
import { buildTokenizer, writeTokenizer, TESTKIT_SPECIAL_TOKENS } from '../src/tokenizer-builder.ts'

function load(dir: string): Tokenizer {
  return new Tokenizer(
    JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')),
    JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')),
  )
}

t.test('loads with @huggingface/tokenizers; ids and specials are as reported', async (t) => {
  const dir = t.testdir()
  const info = writeTokenizer(dir)
  const tok = load(dir)
  t.equal(tok.get_vocab(true).size, info.vocabSize)
  t.ok(info.vocabSize > 256 + 100 && info.vocabSize < 1000, `vocab ${info.vocabSize}`)
  for (const s of TESTKIT_SPECIAL_TOKENS) t.equal(tok.token_to_id(s), info.specialTokenIds[s])
  t.equal(tok.token_to_id('<|bos|>'), info.bosTokenId)
  t.equal(tok.token_to_id('<|eos|>'), info.eosTokenId)
  const withBos = tok.encode('Hello world', { add_special_tokens: true }).ids
  const without = tok.encode('Hello world', { add_special_tokens: false }).ids
  t.same(withBos, [info.bosTokenId, ...without])
  t.ok(without.length < 'Hello world'.length, 'merges shorten common English')
  t.same(tok.encode('<|user|>\nhi<|eos|>', { add_special_tokens: false }).ids.slice(0, 1), [
    info.specialTokenIds['<|user|>'],
  ])
})

t.test('round-trips arbitrary UTF-8 (emoji, accents, CJK, control characters)', async (t) => {
  const dir = t.testdir()
  writeTokenizer(dir)
  const tok = load(dir)
  const samples = [
    'héllo wörld, ça va?',
    '👩‍👩‍👧 🎉 😀',
    '日本語のテキスト、中文，한국어',
    'tabs\tand\nnewlines\r\n  spaces  ',
    '\u0000\u0001 ',
  ]
  const rng = new SeededRandom(7)
  const alphabet = [...'abc XYZ 012 .,!? é ñ 日本 😀 👍🏽 \n\t']
  for (let i = 0; i < 50; i++) {
    samples.push(Array.from({ length: 1 + rng.int(30) }, () => alphabet[rng.int(alphabet.length)]).join(''))
  }
  for (const s of samples) {
    const ids = tok.encode(s, { add_special_tokens: false }).ids
    t.equal(tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }), s, JSON.stringify(s))
  }
})

t.test('deterministic, and options change what they say', async (t) => {
  t.same(buildTokenizer().tokenizerJson, buildTokenizer().tokenizerJson)
  const small = buildTokenizer({ numMerges: 10 })
  t.equal(small.info.vocabSize, 256 + 10 + TESTKIT_SPECIAL_TOKENS.length)
  const noBos = buildTokenizer({ addBosToken: false, chatTemplate: null, extraSpecialTokens: ['<|tool|>'] })
  t.notOk('chat_template' in noBos.tokenizerConfig)
  t.ok(noBos.info.specialTokenIds['<|tool|>'] !== undefined)
  const tok = new Tokenizer(noBos.tokenizerJson, noBos.tokenizerConfig)
  t.notOk(tok.encode('hi', { add_special_tokens: true }).ids.includes(noBos.info.bosTokenId))
  const list = buildTokenizer({ chatTemplateAsList: true }).tokenizerConfig.chat_template as { name: string }[]
  t.same(
    list.map((x) => x.name),
    ['default', 'tool_use'],
  )
})

t.test('the chat template renders with @huggingface/jinja', async (t) => {
  const { Template } = await import('@huggingface/jinja')
  const { info } = buildTokenizer()
  const text = new Template(info.chatTemplate!).render({
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ],
    bos_token: info.bosToken,
    eos_token: info.eosToken,
    add_generation_prompt: true,
  })
  t.equal(text, '<|bos|><|system|>\nBe brief.<|eos|>\n<|user|>\nHi<|eos|>\n<|assistant|>\n')
  t.throws(() =>
    new Template(info.chatTemplate!).render({
      messages: [{ role: 'tool', content: 'x' }],
      bos_token: '',
      eos_token: '',
    }),
  )
})
