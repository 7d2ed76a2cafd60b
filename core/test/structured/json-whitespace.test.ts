import t from 'tap'
import type { ResponseFormat, TokenConstraint } from '../../src/contracts/grammar.ts'
import { boundJsonWhitespace } from '../../src/structured/bound-json-whitespace.ts'
import { XGrammarConstraintFactory } from '../../src/structured/index.ts'
import { paddedModel } from './padded-model.fixture.ts'

// QA: `json_object` on the demo model wrote `{` and then newlines until max_tokens, because
// XGrammar's free-form JSON rules allow any amount of whitespace; later (issue 13) it still spent
// its budget on bounded runs of newlines, so compact JSON became the default and the bounded runs
// the `flexible` option. These tests drive the compiled grammar one character (one byte-level
// token) at a time.
const dir = t.testdir()
const { vocabSize: V, eos: EOS, tokenizer, factory } = await paddedModel(dir)
const DEFAULT_MAX = 24
const ANY_OBJECT: ResponseFormat = { type: 'json_object', whitespace: 'flexible' }
const COMPACT_OBJECT: ResponseFormat = { type: 'json_object' }

/** The one token that is exactly `ch`. */
function tokenOf(ch: string): number {
  const ids = tokenizer.encode(ch, { addSpecialTokens: false })
  if (ids.length !== 1) throw new Error(`${JSON.stringify(ch)} is ${ids.length} tokens`)
  return ids[0]!
}

/**
 * Feed `text` one character at a time (a non-ASCII character as its byte tokens); returns how many
 * UTF-16 units of it the constraint accepted.
 */
function feed(constraint: TokenConstraint, text: string): number {
  let accepted = 0
  for (const ch of text) {
    for (const id of tokenizer.encode(ch, { addSpecialTokens: false })) if (!constraint.accept(id)) return accepted
    accepted += ch.length
  }
  return accepted
}

const isAllowed = (mask: Uint32Array, id: number): boolean => ((mask[id >>> 5]! >>> (id & 31)) & 1) === 1

/** Whether the constraint accepts all of `text` and then ends (eos allowed and accepted). */
function acceptsWhole(constraint: TokenConstraint, text: string): boolean {
  if (feed(constraint, text) !== text.length) return false
  const mask = new Uint32Array(Math.ceil(V / 32))
  constraint.fillNextTokenMask(mask)
  return isAllowed(mask, EOS) && constraint.accept(EOS) && constraint.isTerminated()
}

// Every place JSON allows whitespace inside an object: the text before `@` and the text after it,
// with the whitespace run inserted at `@`.
const POSITIONS = [
  '{@"a":1}',
  '{"a"@:1}',
  '{"a":@1}',
  '{"a":1@}',
  '{"a":1@,"b":2}',
  '{"a":1,@"b":2}',
  '{"a":[@1]}',
  '{"a":[1@]}',
  '{"a":[1@,2]}',
  '{"a":[1,@2]}',
  '{"a":[@]}',
  '{"a":{@}}',
  '{@}',
  '{"a":{"b":@null}}',
]

t.test('compact (the default): at most one space wherever JSON allows whitespace, no newline or tab', async (t) => {
  for (const position of POSITIONS) {
    const [before, after] = position.split('@') as [string, string]
    t.ok(acceptsWhole(await factory.create(COMPACT_OBJECT), before + after), `none at ${position}`)
    t.ok(acceptsWhole(await factory.create(COMPACT_OBJECT), `${before} ${after}`), `one space at ${position}`)
    for (const ws of ['  ', '\n', '\t']) {
      const c = await factory.create(COMPACT_OBJECT)
      t.equal(feed(c, before + ws), before.length + ws.length - 1, `${JSON.stringify(ws)} at ${position} refused`)
    }
  }
  // The same inside a schema's own rules (XGrammar's) as in the free-form ones (Loom's bound).
  const schema: ResponseFormat = {
    type: 'json_schema',
    name: 'point',
    schema: { type: 'object', properties: { x: { type: 'integer' }, tags: { type: 'array', items: {} } } },
    strict: true,
  }
  t.ok(acceptsWhole(await factory.create(schema), '{"x":1,"tags":[{"a":[]}]}'))
  t.ok(acceptsWhole(await factory.create(schema), '{ "x": 1, "tags": [ { "a": [ ] } ] }'))
  t.equal(feed(await factory.create(schema), '{"x":\n'), 5, 'no newline in a schema rule')
  t.equal(feed(await factory.create(schema), '{"x":1,"tags":[\n'), 15, 'no newline in a free-form value')
  t.equal(feed(await factory.create(schema), JSON.stringify({ x: 1 }, null, 2)), 1, 'no pretty-printing')
  // The request's choice wins over the factory's default, both ways.
  t.ok(acceptsWhole(await factory.create({ ...schema, whitespace: 'flexible' }), '{\n  "x": 1\n}'))
  const flexibleByDefault = await XGrammarConstraintFactory.fromModelDir(dir, {
    vocabSize: V,
    eosTokenIds: [EOS],
    jsonWhitespace: 'flexible',
  })
  t.teardown(() => flexibleByDefault.close())
  t.ok(acceptsWhole(await flexibleByDefault.create(COMPACT_OBJECT), '{\n  "x": 1\n}'), 'factory default: flexible')
  t.equal(feed(await flexibleByDefault.create({ ...COMPACT_OBJECT, whitespace: 'compact' }), '{\n'), 1)
})

t.test('flexible json_object: a whitespace run longer than the bound is refused wherever it occurs', async (t) => {
  for (const ws of [' ', '\n', '\t']) {
    for (const position of POSITIONS) {
      const [before, after] = position.split('@') as [string, string]
      const atBound = await factory.create(ANY_OBJECT)
      t.ok(
        acceptsWhole(atBound, before + ws.repeat(DEFAULT_MAX) + after),
        `${DEFAULT_MAX} × ${JSON.stringify(ws)} at ${position}`,
      )
      const past = await factory.create(ANY_OBJECT)
      t.equal(feed(past, before), before.length, `prefix of ${position}`)
      t.equal(
        feed(past, ws.repeat(DEFAULT_MAX + 1)),
        DEFAULT_MAX,
        `whitespace ${DEFAULT_MAX + 1} at ${position} refused`,
      )
      const mask = new Uint32Array(Math.ceil(V / 32))
      past.fillNextTokenMask(mask)
      t.notOk(isAllowed(mask, tokenOf(ws)), 'and masked out')
      t.ok(acceptsWhole(past, after), `the object still closes after ${DEFAULT_MAX}`)
    }
  }
  // Mixed runs count together: 24 characters of any whitespace, not 24 of each kind.
  const mixed = await factory.create(ANY_OBJECT)
  t.equal(feed(mixed, '{' + ' \n\t'.repeat(9)), 1 + DEFAULT_MAX)
})

t.test('flexible json_object: compact and indented objects of every JSON type are accepted', async (t) => {
  const value = {
    name: 'Loom',
    'key with "quotes" and \\': 'tab\tnewline\n and é ✓',
    count: 42,
    negative: -0.5,
    exponent: 6.02e23,
    yes: true,
    no: false,
    none: null,
    empty: {},
    list: [[false], []],
    // Five levels deep: a line break and 5 × 4 spaces of indentation fit the bound of 24.
    nested: { deeper: [1, 'two', { three: [null, true, false] }] },
    matrix: [
      [1, 2],
      [3, 4],
    ],
  }
  for (const indent of [undefined, 1, 2, 4, '\t']) {
    const text = JSON.stringify(value, null, indent)
    t.ok(acceptsWhole(await factory.create(ANY_OBJECT), text), `indent ${JSON.stringify(indent)}`)
  }
  t.ok(acceptsWhole(await factory.create(COMPACT_OBJECT), JSON.stringify(value)), 'compact: every type')
  t.ok(acceptsWhole(await factory.create(ANY_OBJECT), '{}'))
  t.ok(acceptsWhole(await factory.create(ANY_OBJECT), '{ "a" : 1 , "b" : [ 1 , 2 ] }'), 'spaces around separators')
  // Still an object, not any JSON value.
  t.equal(feed(await factory.create(ANY_OBJECT), '[1]'), 0, 'an array is refused')
  t.equal(feed(await factory.create(ANY_OBJECT), ' {}'), 0, 'no leading whitespace')
})

t.test('flexible: free-form values inside a schema are bounded too; the bound is configurable', async (t) => {
  // `meta: {}` is any JSON value: XGrammar's free-form rules, inside a schema's own object.
  const open: ResponseFormat = {
    type: 'json_schema',
    name: 'open',
    schema: { type: 'object', properties: { meta: {} }, required: ['meta'] },
    strict: true,
    whitespace: 'flexible',
  }
  const c = await factory.create(open)
  t.equal(feed(c, '{"meta":['), 9)
  t.equal(feed(c, '\n'.repeat(DEFAULT_MAX + 5)), DEFAULT_MAX)
  t.ok(acceptsWhole(c, '1]}'))
  t.ok(acceptsWhole(await factory.create(open), JSON.stringify({ meta: { a: [1, { b: null }] } }, null, 2)))

  const tight = await XGrammarConstraintFactory.fromModelDir(dir, {
    vocabSize: V,
    eosTokenIds: [EOS],
    maxWhitespace: 3,
  })
  t.teardown(() => tight.close())
  const d = await tight.create(ANY_OBJECT)
  t.equal(feed(d, '{     '), 4, 'maxWhitespace: 3')
  t.ok(acceptsWhole(d, '"a":1}'))
  t.throws(
    () => new XGrammarConstraintFactory({ tokenizerJson: {}, vocabSize: V, eosTokenIds: [EOS], maxWhitespace: 0 }),
    RangeError,
  )
})

t.test('boundJsonWhitespace rewrites only starred structural whitespace', async (t) => {
  const ebnf = [
    'root ::= "{" [ \\n\\t]* members [ \\n\\t]* "}"',
    'members ::= "\\"[ \\n\\t]*\\"" [ ]* [ \\t]* [ \\n\\t] [ \\n\\t\\r]* [^ \\n\\t]* # [ \\n\\t]*',
  ].join('\n')
  t.equal(
    boundJsonWhitespace(ebnf, 5),
    [
      'root ::= "{" loom_ws members loom_ws "}"',
      // A literal, classes without a newline, an unstarred class, a negated class and a comment stay.
      'members ::= "\\"[ \\n\\t]*\\"" [ ]* [ \\t]* [ \\n\\t] loom_ws [^ \\n\\t]* # [ \\n\\t]*',
      'loom_ws ::= [ \\n\\t]{0,5}',
      '',
    ].join('\n'),
  )
  t.equal(
    boundJsonWhitespace(ebnf, 1, true),
    [
      'root ::= "{" loom_ws members loom_ws "}"',
      // Every structural class admits only the space, starred or not.
      'members ::= "\\"[ \\n\\t]*\\"" [ ]* [ \\t]* [ ] loom_ws [^ \\n\\t]* # [ \\n\\t]*',
      'loom_ws ::= [ ]{0,1}',
      '',
    ].join('\n'),
  )
  t.equal(boundJsonWhitespace('a ::= "x" ([ \\n\\t])\n', 1, true), 'a ::= "x" ([ ])\n', 'spaces only, no run')
  const untouched = 'root ::= "a" [ ]*\n'
  t.equal(boundJsonWhitespace(untouched, 5), untouched, 'no starred newline class: unchanged')
  t.throws(() => boundJsonWhitespace(ebnf, 0), RangeError)
})
