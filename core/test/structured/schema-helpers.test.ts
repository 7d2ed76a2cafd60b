import t from 'tap'
import { buildTokenizer } from '@loom/testkit'
import { canonicalSchemaJson } from '../../src/structured/canonical-json.ts'
import { CompiledGrammarCache } from '../../src/structured/compiled-grammar-cache.ts'
import { UTF8_NON_ASCII } from '../../src/structured/json-string-chars.ts'
import { sanitizeJsonGrammar } from '../../src/structured/sanitize-json-grammar.ts'
import { vocabularyFromTokenizerJson } from '../../src/structured/tokenizer-vocabulary.ts'

t.test('canonical schema JSON sorts keys but keeps property order', async (t) => {
  const a = canonicalSchemaJson({ type: 'object', properties: { b: { type: 'string' }, a: { type: 'integer' } } })
  const b = canonicalSchemaJson({ properties: { b: { type: 'string' }, a: { type: 'integer' } }, type: 'object' })
  t.equal(a, b)
  t.equal(a, '{"properties":{"b":{"type":"string"},"a":{"type":"integer"}},"type":"object"}')
  t.not(canonicalSchemaJson({ properties: { a: {}, b: {} } }), canonicalSchemaJson({ properties: { b: {}, a: {} } }))
  t.not(canonicalSchemaJson({ enum: [{ a: 1 }] }), canonicalSchemaJson({ enum: [[['a', 1]]] }))
  t.same(JSON.parse(a), JSON.parse(b))
})

t.test('the grammar cache is a bounded LRU sharing in-flight compiles', async (t) => {
  const evicted: string[] = []
  const cache = new CompiledGrammarCache<string>(2, (v) => evicted.push(v))
  let compiles = 0
  const compile = (v: string) => () => {
    compiles++
    return Promise.resolve(v)
  }
  const [x, y] = await Promise.all([cache.getOrCompile('a', compile('A')), cache.getOrCompile('a', compile('A'))])
  t.equal(x, y)
  t.equal(compiles, 1)
  await cache.getOrCompile('b', compile('B'))
  await cache.getOrCompile('a', compile('A')) // a is now the most recent
  await cache.getOrCompile('c', compile('C'))
  await Promise.resolve()
  t.same(evicted, ['B'])
  await t.rejects(cache.getOrCompile('bad', () => Promise.reject(new Error('no'))))
  await Promise.resolve()
  t.equal(await cache.getOrCompile('bad', compile('OK')), 'OK', 'a failed compile is retried')
  t.throws(() => new CompiledGrammarCache(0, () => undefined), RangeError)
})

t.test('sanitizeJsonGrammar narrows string classes outside literals', async (t) => {
  // Printable ASCII but `"` and `\\`, or a valid multi-byte UTF-8 sequence.
  const TEXT = `([ !#-\\[\\]-\\x7f] | ${UTF8_NON_ASCII})`
  const ebnf = 'string ::= "\\"" [^"\\\\\\r\\n]{0,12} "[^x]" [\\u0000-\\U0010FFFF] [0-9] "\\""'
  t.equal(sanitizeJsonGrammar(ebnf), `string ::= "\\"" ${TEXT}{0,12} "[^x]" ${TEXT} [0-9] "\\""`)
  t.equal(sanitizeJsonGrammar('# [^a] comment\nroot ::= [a-z]'), '# [^a] comment\nroot ::= [a-z]')
})

t.test('vocabulary from tokenizer.json', async (t) => {
  const built = buildTokenizer({ extraSpecialTokens: ['<|tool|>'] })
  const json = built.tokenizerJson as { added_tokens: unknown[] }
  json.added_tokens.push({ id: built.info.vocabSize + 1, content: 'hi there', special: false })
  const v = vocabularyFromTokenizerJson(json)
  t.equal(v.vocabType, 'byte_level')
  t.equal(v.prependSpace, false)
  t.equal(v.encodedVocab.length, built.info.vocabSize + 2)
  for (const id of Object.values(built.info.specialTokenIds)) t.equal(v.encodedVocab[id], '', `special ${id} hidden`)
  t.equal(v.encodedVocab[built.info.vocabSize], '', 'a hole in the ids is empty')
  t.equal(v.encodedVocab[built.info.vocabSize + 1], 'hiĠthere', 'added text re-encoded to byte-level')
  t.equal(v.encodedVocab[0xc0], '', 'a byte never in UTF-8 is never allowed')
  t.equal(v.encodedVocab[0x41], 'A')

  const sp = vocabularyFromTokenizerJson({
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' }] },
    decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }] },
    model: { type: 'BPE', vocab: { '<unk>': 0, '<0xC1>': 1, '<0x0A>': 2, '\u2581hi': 3 } },
    added_tokens: [{ id: 0, content: '<unk>', special: true }],
  })
  t.same(sp, { encodedVocab: ['', '', '<0x0A>', '\u2581hi'], vocabType: 'byte_fallback', prependSpace: true })
})
