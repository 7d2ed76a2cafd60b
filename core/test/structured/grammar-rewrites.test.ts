import t from 'tap'
import { SeededRandom } from '@loom/testkit'
import { intervalGrammar, type NumericInterval } from '../../src/structured/decimal-interval-grammar.ts'
import {
  escapeLiteralForJsonString,
  narrowClassForJsonString,
  UTF8_NON_ASCII,
} from '../../src/structured/json-string-chars.ts'
import { patternGrammar } from '../../src/structured/pattern-grammar.ts'
import { prepareSchema } from '../../src/structured/prepare-schema.ts'
import { spliceGrammar } from '../../src/structured/splice-grammar.ts'
import { LoomError } from '../../src/errors/index.ts'

/** The (non-recursive) interval grammar as one anchored JS regex. */
function intervalRegex(interval: NumericInterval): RegExp {
  const { root, rules } = intervalGrammar('n', interval)
  const bodies = new Map(rules.map((line) => line.split(' ::= ') as [string, string]))
  const expand = (name: string): string =>
    bodies
      .get(name)!
      .replace(/"(\\.|[^"])*"|\[[^\]]*\]|n_\w+|\s+/g, (token) => {
        if (token.startsWith('"')) return token.slice(1, -1).replace(/[.\-]/g, '\\$&')
        if (token.startsWith('[')) return token
        if (token.startsWith('n_')) return `(?:${expand(token)})`
        return ''
      })
      .replace(/\(/g, '(?:')
      .replace(/\(\?:\?:/g, '(?:')
  return new RegExp(`^${expand(root)}$`)
}

/** Exact comparison of two plain decimal strings. */
function compareDecimal(a: string, b: string): number {
  const parse = (s: string): [bigint, number] => {
    const neg = s.startsWith('-')
    const [whole, frac = ''] = (neg ? s.slice(1) : s).split('.')
    return [BigInt(`${neg ? '-' : ''}${whole}${frac}`), frac.length]
  }
  const [ma, sa] = parse(a)
  const [mb, sb] = parse(b)
  const scale = Math.max(sa, sb)
  const x = ma * 10n ** BigInt(scale - sa)
  const y = mb * 10n ** BigInt(scale - sb)
  return x < y ? -1 : x > y ? 1 : 0
}

const plain = (x: number): string => {
  const s = String(x)
  if (!/e/.test(s)) return s
  return x.toFixed(20).replace(/\.?0+$/, '')
}

t.test('interval grammars accept exactly the in-range decimals', async (t) => {
  const rng = new SeededRandom(7)
  const intervals: NumericInterval[] = [
    { integer: true, min: { value: 0, exclusive: false }, max: { value: 150, exclusive: false } },
    { integer: true, min: { value: -5000, exclusive: false }, max: { value: 100000, exclusive: false } },
    { integer: true, min: { value: -3, exclusive: true }, max: { value: 7, exclusive: true } },
    { integer: true, min: { value: 2.5, exclusive: false }, max: { value: 9.5, exclusive: true } },
    { integer: true, min: { value: 10, exclusive: false } },
    { integer: true, max: { value: -10, exclusive: true } },
    { integer: false, min: { value: 0.5, exclusive: false }, max: { value: 2, exclusive: false } },
    { integer: false, min: { value: 0, exclusive: true }, max: { value: 1, exclusive: true } },
    { integer: false, min: { value: -1.25, exclusive: false }, max: { value: 3.75, exclusive: true } },
    { integer: false, min: { value: -100, exclusive: true }, max: { value: -0.001, exclusive: false } },
    { integer: false, min: { value: 0, exclusive: true } },
    { integer: false, max: { value: 99.99, exclusive: false } },
    { integer: false, min: { value: 1e-7, exclusive: false }, max: { value: 2e-7, exclusive: false } },
  ]
  for (const interval of intervals) {
    const re = intervalRegex(interval)
    const candidates = new Set<string>(['0', '-0', '1', '-1', '0.0', '1.50', '150', '151', '159', '-5001', '2.0000001'])
    for (const bound of [interval.min, interval.max]) {
      if (bound === undefined) continue
      const b = plain(bound.value)
      candidates.add(b)
      for (const delta of ['1', '0.1', '0.000001', '0.0000001', '0.5']) {
        candidates.add(plain(Number(b) + Number(delta)))
        candidates.add(plain(Number(b) - Number(delta)))
      }
    }
    for (let i = 0; i < 400; i++) {
      const whole = Math.floor(rng.next() * 10 ** Math.floor(rng.next() * 7))
      const frac =
        rng.next() < 0.5 ? '' : `.${String(Math.floor(rng.next() * 1e6)).padStart(Math.ceil(rng.next() * 6), '0')}`
      candidates.add(`${rng.next() < 0.4 ? '-' : ''}${whole}${frac}`)
    }
    let wrong = 0
    const boundFraction = [interval.min, interval.max].map((b) =>
      b === undefined ? 0 : (plain(b.value).split('.')[1]?.length ?? 0),
    )
    const maxFraction = Math.max(6, ...boundFraction)
    for (const text of candidates) {
      if (!/^-?(0|[1-9]\d*)(\.\d+)?$/.test(text)) continue
      const digits = text.replace(/[-.]/g, '').replace(/^0+(?=\d)/, '').length
      const fraction = text.split('.')[1]?.length ?? 0
      let inside = !(text.startsWith('-') && compareDecimal(text, '0') === 0)
      if (interval.integer && fraction > 0) inside = false
      if (digits > 15 || fraction > maxFraction) inside = false
      if (interval.min !== undefined) {
        const c = compareDecimal(text, plain(interval.min.value))
        if (c < 0 || (c === 0 && interval.min.exclusive)) inside = false
      }
      if (interval.max !== undefined) {
        const c = compareDecimal(text, plain(interval.max.value))
        if (c > 0 || (c === 0 && interval.max.exclusive)) inside = false
      }
      const accepted = re.test(text)
      if (accepted !== inside) {
        if (++wrong <= 5) t.fail(`${JSON.stringify(interval)}: ${text} accepted=${accepted}`)
      }
      if (accepted) {
        // What a validator sees: the parsed double against the schema's bounds.
        const v = Number(text)
        const okMin =
          interval.min === undefined || (interval.min.exclusive ? v > interval.min.value : v >= interval.min.value)
        const okMax =
          interval.max === undefined || (interval.max.exclusive ? v < interval.max.value : v <= interval.max.value)
        if (!okMin || !okMax) t.fail(`${text} accepted but out of range as a double`)
      }
    }
    t.equal(wrong, 0, JSON.stringify(interval))
  }
})

t.test("bounds beyond 15 digits on their open side (zod's int: ±(2^53 - 1)) are no bound", async (t) => {
  const safe = Number.MAX_SAFE_INTEGER
  const zod = intervalRegex({
    integer: true,
    min: { value: -safe, exclusive: false },
    max: { value: safe, exclusive: false },
  })
  const free = intervalRegex({ integer: true })
  for (const text of ['0', '-7', '42', '999999999999999', '-999999999999999']) {
    t.ok(zod.test(text), `${text} accepted`)
    t.equal(zod.test(text), free.test(text))
  }
  t.notOk(zod.test('1000000000000000'), 'still no 16th digit')
  const half = intervalRegex({
    integer: true,
    min: { value: -1e300, exclusive: true },
    max: { value: 10, exclusive: false },
  })
  t.ok(half.test('-123456789012345') && half.test('10') && !half.test('11'))
})

t.test('interval grammars refuse bounds they cannot write', async (t) => {
  t.throws(() => intervalGrammar('n', { integer: true, min: { value: 1e16, exclusive: false } }))
  t.throws(() =>
    intervalGrammar('n', {
      integer: true,
      min: { value: 0.2, exclusive: false },
      max: { value: 0.8, exclusive: false },
    }),
  )
  t.throws(() =>
    intervalGrammar('n', { integer: false, min: { value: 3, exclusive: false }, max: { value: 2, exclusive: false } }),
  )
})

t.test('prepareSchema marks bounded numbers and patterns, refuses what a grammar cannot honour', async (t) => {
  const { schema, splices } = prepareSchema({
    type: 'object',
    properties: {
      n: { type: 'number', minimum: 0.5, exclusiveMaximum: 2, description: 'x' },
      i: { type: ['integer', 'null'], minimum: 1 },
      s: { type: 'string', pattern: '^[a-z]+$' },
      e: { type: 'integer', enum: [1, 2], minimum: 0 },
      enum: { type: 'integer', maximum: 3 },
    },
    $defs: { d: { type: 'integer', exclusiveMinimum: 0 } },
  })
  t.same(schema, {
    type: 'object',
    properties: {
      n: { const: 'LOOMSPLICE0' },
      i: { anyOf: [{ const: 'LOOMSPLICE1' }, { type: 'null', minimum: 1 }] },
      s: { const: 'LOOMSPLICE2' },
      e: { type: 'integer', enum: [1, 2], minimum: 0 },
      enum: { const: 'LOOMSPLICE3' },
    },
    $defs: { d: { const: 'LOOMSPLICE4' } },
  })
  t.same(splices.get('LOOMSPLICE0'), {
    kind: 'interval',
    interval: { integer: false, min: { value: 0.5, exclusive: false }, max: { value: 2, exclusive: true } },
  })
  t.same(splices.get('LOOMSPLICE2'), { kind: 'pattern', pattern: '^[a-z]+$' })
  t.same(splices.get('LOOMSPLICE4'), {
    kind: 'interval',
    interval: { integer: true, min: { value: 0, exclusive: true } },
  })
  // A schema that mentions the marker text gets a different one.
  t.ok(
    prepareSchema({ anyOf: [{ const: 'LOOMSPLICE0' }, { type: 'integer', minimum: 0 }] }).splices.has('LOOMSPLICEX0'),
  )

  const refused: [unknown, string][] = [
    [{ oneOf: [{ type: 'string' }, { type: 'integer' }] }, 'oneOf'],
    [{ type: 'integer', multipleOf: 3 }, 'multipleOf'],
    [{ type: 'array', uniqueItems: true }, 'uniqueItems'],
    [{ not: { type: 'string' } }, 'not'],
    [{ allOf: [{ type: 'integer' }, { minimum: 2 }] }, 'allOf'],
    [{ type: 'string', pattern: '^a+$', maxLength: 3 }, 'maxLength'],
    [{ type: 'string', format: 'email' }, 'format'],
    [{ properties: { a: { if: { type: 'string' } } } }, 'if'],
    [{ type: 'number', minimum: 'x' }, 'minimum'],
  ]
  for (const [bad, keyword] of refused) {
    const err = t.throws(() => prepareSchema(bad)) as unknown
    t.ok(err instanceof LoomError && err.code === 'grammar_unsupported', keyword)
    t.match((err as Error).message, `\`${keyword}\``)
  }
  t.doesNotThrow(() => prepareSchema({ type: 'array', uniqueItems: false, items: { allOf: [{ type: 'string' }] } }))
})

t.test('string characters: classes keep printable ASCII and valid UTF-8, literals are escaped', async (t) => {
  const PRINTABLE = '[ !#-\\[\\]-\\x7f]'
  t.equal(narrowClassForJsonString('[a-z\\"]'), '[a-z]')
  t.equal(narrowClassForJsonString('[ -~]'), '[ !#-\\[\\]-~]')
  t.equal(narrowClassForJsonString('[a-zé]'), '[a-z]', 'a class naming some non-ASCII characters loses them')
  t.equal(narrowClassForJsonString('[^\\"]'), `(${PRINTABLE} | ${UTF8_NON_ASCII})`)
  t.equal(narrowClassForJsonString('[\\0-\\U0010ffff]'), `(${PRINTABLE} | ${UTF8_NON_ASCII})`)
  t.equal(narrowClassForJsonString('[^x]'), `([ !#-\\[\\]-wy-\\x7f] | ${UTF8_NON_ASCII})`)
  t.equal(narrowClassForJsonString('[^é]'), '[ !#-\\[\\]-\\x7f]')
  t.equal(narrowClassForJsonString('[\\f\\n\\r\\t\\v \\xa0]'), '[ ]')
  t.equal(narrowClassForJsonString('[\\"\\\\]'), null)
  t.equal(escapeLiteralForJsonString('"a\\"b"'), '"a\\\\\\"b"')
  t.equal(escapeLiteralForJsonString('"\\\\"'), '"\\\\\\\\"')
  t.equal(escapeLiteralForJsonString('"\\n"'), '"\\\\n"')
  t.equal(escapeLiteralForJsonString('"é"'), '"\\xe9"')
})

t.test('pattern grammars are renamed and refused in shapes not understood', async (t) => {
  const ebnf = [
    'basic_any ::= ((basic_number))',
    'string ::= (("\\"" [a-z\\"] string_1 "\\""))',
    'root ::= ((string))',
    'string_1 ::= ("" | ([^x] string_1))',
  ].join('\n')
  const g = patternGrammar('p', ebnf)
  t.equal(g.root, 'p_root')
  t.same(g.rules, [
    'p_root ::= ("\\"" [a-z] p_string_1 "\\"")',
    `p_string_1 ::= ("" | (([ !#-\\[\\]-wy-\\x7f] | ${UTF8_NON_ASCII}) p_string_1))`,
  ])
  t.throws(() => patternGrammar('p', 'string ::= (("\\"" "a" "b") | ("c" "d" "\\""))\nroot ::= ((string))'))
  t.throws(() => patternGrammar('p', 'root ::= (("\\"" "a" "\\""))'))
})

t.test('spliceGrammar swaps marker literals for rules', async (t) => {
  const out = spliceGrammar('root ::= (("{" "\\"LOOMSPLICE0\\"" "}"))\nx ::= ("\\"LOOMSPLICE0\\",")\n', new Map())
  t.match(out, 'LOOMSPLICE0')
  const rules = new Map([['LOOMSPLICE0', { root: 'n_root', rules: ['n_root ::= ("1")'] }]])
  t.equal(
    spliceGrammar('root ::= (("[" "\\"LOOMSPLICE0\\"" "]"))\n', rules),
    'root ::= (("[" n_root "]"))\nn_root ::= ("1")\n',
  )
  t.throws(() => spliceGrammar('root ::= (("\\"LOOMSPLICE0\\","))\n', rules))
})

t.test('schemas nested deeper than 32 levels are refused by name, not by an engine crash', async (t) => {
  const nest = (depth: number, wrap: (inner: unknown) => unknown) => {
    let schema: unknown = { type: 'integer' }
    for (let i = 0; i < depth; i++) schema = wrap(schema)
    return schema
  }
  const arrays = (inner: unknown) => ({ type: 'array', items: inner })
  const objects = (inner: unknown) => ({ type: 'object', properties: { a: inner }, required: ['a'] })
  for (const wrap of [arrays, objects]) {
    t.doesNotThrow(() => prepareSchema(nest(32, wrap)))
    t.throws(() => prepareSchema(nest(33, wrap)), {
      code: 'grammar_unsupported',
      message: /`nesting` is not supported: schemas nested more than 32 levels deep are not supported/,
    })
  }
})

t.test('schemas with more than 64 properties in all are refused before compiling', async (t) => {
  const object = (n: number, offset = 0) => ({
    type: 'object',
    properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i + offset}`, { type: 'string' }])),
  })
  t.doesNotThrow(() => prepareSchema(object(64)))
  t.throws(() => prepareSchema(object(65)), {
    code: 'grammar_unsupported',
    message:
      /`properties` is not supported: schemas with more than 64 properties in all are not supported \(this one has 65\)/,
  })
  t.throws(() => prepareSchema({ type: 'array', items: { anyOf: [object(40), object(30, 40)] } }), {
    message: /this one has 70/,
  })
})

t.test('property names with control characters are refused by name, not by an EBNF lexer error', async (t) => {
  t.throws(() => prepareSchema({ type: 'object', properties: { 'a\nb': { type: 'boolean' } }, required: ['a\nb'] }), {
    code: 'grammar_unsupported',
    message:
      /`properties` is not supported: property names with `"` or control characters \("a\\nb"\) are not supported/,
  })
  t.throws(() => prepareSchema({ type: 'object', properties: { 'a"b': { type: 'boolean' } } }), {
    code: 'grammar_unsupported',
  })
  t.doesNotThrow(() => prepareSchema({ type: 'object', properties: { 'a b/ü\\\t': { type: 'boolean' } } }))
})

t.test('schemas a grammar would honour only partly are refused by keyword', async (t) => {
  const cases: [unknown, RegExp][] = [
    [
      { type: 'integer', minimum: 1, enum: [5, 0] },
      /`enum` is not supported: 0 is listed but excluded by the schema's other keywords/,
    ],
    [{ enum: ['ab', 'zz'], pattern: '^a' }, /"zz" is listed but excluded/],
    [{ const: 'abc', maxLength: 2 }, /`const` is not supported: "abc" is listed but excluded/],
    [{ $ref: 'http://example.com/s.json' }, /`\$ref` is not supported: only references inside the schema/],
    [{ type: 'integer', minimum: true }, /`minimum` is not supported: it must be a finite number, not true/],
    [{ enum: [] }, /`enum` is not supported: an empty enum admits no value/],
    [{ type: 'string', format: 'date' }, /`format` is not supported: `date` is checked by shape only/],
    [{ type: 'string', format: 'date-time' }, /`date-time` is checked by shape only/],
    [{ type: 'string', maxLength: 1000 }, /`maxLength` is not supported: values above 256 are not supported/],
    [{ type: 'string', minLength: 300 }, /`minLength` is not supported: values above 256/],
  ]
  for (const [schema, message] of cases) t.throws(() => prepareSchema(schema), { code: 'grammar_unsupported', message })
  t.doesNotThrow(() => prepareSchema({ $defs: { a: { type: 'integer' } }, $ref: '#/$defs/a' }))
  t.doesNotThrow(() => prepareSchema({ enum: [1, 2, 'x'] }))
  t.doesNotThrow(() => prepareSchema({ type: 'string', minLength: 256, maxLength: 256 }))
  t.doesNotThrow(() => prepareSchema({ type: 'integer', minimum: 0, enum: [1, 2] }), 'every listed value passes')
})
