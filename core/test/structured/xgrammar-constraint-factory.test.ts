import t, { type Test } from 'tap'
import { buildTokenizer, SeededRandom } from '@loom/testkit'
import type { ResponseFormat, TokenConstraint } from '../../src/contracts/grammar.ts'
import { GREEDY_SAMPLING, type SamplingParams } from '../../src/contracts/sampling.ts'
import { SamplingState, TokenSampler } from '../../src/engine/index.ts'
import { LoomError } from '../../src/errors/index.ts'
import { XGrammarConstraintFactory } from '../../src/structured/index.ts'
import { paddedModel } from './padded-model.fixture.ts'

const { vocabSize: V, eos: EOS, info, tokenizer, factory } = await paddedModel(t.testdir())

const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 150 },
    active: { type: 'boolean' },
    color: { enum: ['red', 'green', 'blue'] },
    tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 3 },
  },
  required: ['name', 'age', 'active', 'color', 'tags'],
  additionalProperties: false,
} as const
const personFormat: ResponseFormat = { type: 'json_schema', name: 'person', schema: PERSON, strict: true }

type Schema = Record<string, unknown>

/** Validates the JSON Schema subset these tests use; returns the problems found. */
function validate(value: unknown, schema: Schema, path = '$'): string[] {
  const problems: string[] = []
  if (Array.isArray(schema.enum) && !schema.enum.includes(value)) problems.push(`${path}: not in enum`)
  switch (schema.type) {
    case 'object': {
      if (value === null || typeof value !== 'object' || Array.isArray(value)) return [`${path}: not an object`]
      const props = (schema.properties ?? {}) as Record<string, Schema>
      const record = value as Record<string, unknown>
      for (const key of (schema.required ?? []) as string[])
        if (!(key in record)) problems.push(`${path}.${key}: missing`)
      for (const [key, v] of Object.entries(record)) {
        if (props[key] !== undefined) problems.push(...validate(v, props[key], `${path}.${key}`))
        else if (schema.additionalProperties === false) problems.push(`${path}.${key}: not allowed`)
      }
      break
    }
    case 'array':
      if (!Array.isArray(value)) return [`${path}: not an array`]
      if (typeof schema.maxItems === 'number' && value.length > schema.maxItems)
        problems.push(`${path}: too many items`)
      value.forEach((v, i) => problems.push(...validate(v, schema.items as Schema, `${path}[${i}]`)))
      break
    case 'string':
      if (typeof value !== 'string') return [`${path}: not a string`]
      if (typeof schema.maxLength === 'number' && [...value].length > schema.maxLength)
        problems.push(`${path}: too long`)
      break
    case 'integer':
      if (!Number.isInteger(value)) return [`${path}: not an integer`]
      if (typeof schema.minimum === 'number' && (value as number) < schema.minimum) problems.push(`${path}: < minimum`)
      if (typeof schema.maximum === 'number' && (value as number) > schema.maximum) problems.push(`${path}: > maximum`)
      break
    case 'boolean':
      if (typeof value !== 'boolean') problems.push(`${path}: not a boolean`)
      break
  }
  return problems
}

const isAllowed = (mask: Uint32Array, id: number): boolean => ((mask[id >>> 5]! >>> (id & 31)) & 1) === 1

function parses(text: string): boolean {
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

interface Decoded {
  readonly ids: number[]
  readonly text: string
  readonly endedAtEos: boolean
}

/**
 * Decode with a random "model" (fresh seeded normal logits every step) masked by the constraint,
 * greedily or by sampling from the softmax. Checks the mask's invariants at every step: ids past
 * the tokenizer and special tokens other than eos are never allowed, and eos is allowed exactly
 * when the text so far is complete JSON.
 */
function decode(t: Test, constraint: TokenConstraint, seed: number, greedy: boolean, maxTokens = 600): Decoded {
  const rng = new SeededRandom(seed)
  const mask = new Uint32Array(Math.ceil(V / 32))
  const ids: number[] = []
  let badMask = 0
  let endedAtEos = false
  for (let step = 0; step < maxTokens; step++) {
    const logits = rng.normalArray(V, 3)
    mask.fill(0)
    constraint.fillNextTokenMask(mask)
    for (let id = info.vocabSize; id < V; id++) if (isAllowed(mask, id)) badMask++
    for (const id of Object.values(info.specialTokenIds)) if (id !== EOS && isAllowed(mask, id)) badMask++
    const text = tokenizer.decode(ids, { skipSpecialTokens: true })
    if (isAllowed(mask, EOS) !== parses(text)) badMask++
    let best = -1
    if (greedy) {
      for (let id = 0; id < V; id++) if (isAllowed(mask, id) && (best < 0 || logits[id]! > logits[best]!)) best = id
    } else {
      let total = 0
      const weights = new Float64Array(V)
      for (let id = 0; id < V; id++) if (isAllowed(mask, id)) total += weights[id] = Math.exp(logits[id]!)
      let u = rng.next() * total
      for (let id = 0; id < V && best < 0; id++) if (weights[id]! > 0 && (u -= weights[id]!) <= 0) best = id
      for (let id = V - 1; id >= 0 && best < 0; id--) if (weights[id]! > 0) best = id
    }
    if (best < 0 || !constraint.accept(best)) {
      t.fail(`step ${step}: no token allowed, or the constraint refused ${best} that its mask allowed`)
      break
    }
    if (best === EOS) {
      endedAtEos = true
      break
    }
    ids.push(best)
  }
  t.equal(badMask, 0, 'no mask invariant broken')
  return { ids, text: tokenizer.decode(ids, { skipSpecialTokens: true }), endedAtEos }
}

t.test('json_schema: greedy and sampled decoding of a random model give valid JSON ending at eos', async (t) => {
  for (const greedy of [true, false]) {
    for (let seed = 1; seed <= 6; seed++) {
      const constraint = await factory.create(personFormat)
      const out = decode(t, constraint, seed * 7919 + (greedy ? 0 : 1), greedy)
      t.ok(out.endedAtEos, `${greedy ? 'greedy' : 'sampled'} seed ${seed} ends at eos: ${out.text}`)
      t.ok(constraint.isTerminated(), 'the constraint terminated with eos')
      const value = JSON.parse(out.text) as unknown
      t.same(validate(value, PERSON), [], `valid: ${out.text}`)
    }
  }
})

t.test('json_object: any JSON object', async (t) => {
  let ended = 0
  for (let seed = 1; seed <= 8; seed++) {
    const out = decode(t, await factory.create({ type: 'json_object' }), seed, false, 1500)
    if (!out.endedAtEos) continue
    ended++
    const value = JSON.parse(out.text) as unknown
    t.ok(value !== null && typeof value === 'object' && !Array.isArray(value), `an object: ${out.text.slice(0, 80)}`)
  }
  t.ok(ended >= 4, `most random walks end (${ended}/8)`)
  // LoRAX's `schema` on json_object constrains like json_schema.
  const out = decode(t, await factory.create({ type: 'json_object', schema: PERSON }), 99, true)
  t.same(validate(JSON.parse(out.text), PERSON), [])
})

t.test('masks cover the model vocabulary; eos only where the grammar can end', async (t) => {
  const constraint = await factory.create({ type: 'json_schema', name: 'n', schema: { type: 'integer' }, strict: true })
  const mask = new Uint32Array(Math.ceil(V / 32)).fill(0xffffffff)
  t.equal(constraint.fillNextTokenMask(mask), true)
  t.notOk(isAllowed(mask, EOS), 'no eos before any digit')
  t.same(
    [...Array(V).keys()].filter((id) => id >= info.vocabSize && isAllowed(mask, id)),
    [],
    'padding ids masked',
  )
  const [seven] = tokenizer.encode('7', { addSpecialTokens: false })
  t.ok(constraint.accept(seven!))
  constraint.fillNextTokenMask(mask)
  t.ok(isAllowed(mask, EOS), 'eos allowed after a complete integer')
  t.notOk(constraint.accept(tokenizer.encode('"', { addSpecialTokens: false })[0]!), 'a quote is refused')
  t.notOk(constraint.accept(V + 5), 'an id outside the vocabulary is refused')
  t.ok(constraint.accept(EOS))
  t.ok(constraint.isTerminated())
  constraint.fillNextTokenMask(mask)
  const allowed = [...Array(V).keys()].filter((id) => isAllowed(mask, id))
  t.same(allowed, [EOS], 'after termination only eos')
  t.ok(constraint.accept(EOS), 'eos again after the end is accepted')
  t.notOk(constraint.accept(seven!), 'anything else is refused')
  constraint.rollback(2)
  t.notOk(constraint.isTerminated(), 'rolling back past eos re-opens the grammar')
  t.throws(() => constraint.rollback(5), RangeError)
})

t.test('rollback: accept 3, roll back 2 gives the mask after 1', async (t) => {
  const constraint = await factory.create(personFormat)
  const ids = tokenizer.encode('{"name', { addSpecialTokens: false })
  t.ok(ids.length >= 3, `prefix is ${ids.length} tokens`)
  const words = Math.ceil(V / 32)
  t.ok(constraint.accept(ids[0]!))
  const afterOne = new Uint32Array(words)
  constraint.fillNextTokenMask(afterOne)
  t.ok(constraint.accept(ids[1]!) && constraint.accept(ids[2]!))
  const afterThree = new Uint32Array(words)
  constraint.fillNextTokenMask(afterThree)
  t.notSame(afterThree, afterOne)
  constraint.rollback(2)
  const rolledBack = new Uint32Array(words)
  constraint.fillNextTokenMask(rolledBack)
  t.same(rolledBack, afterOne)
})

t.test('compiled grammars are cached per schema', async (t) => {
  const local = new XGrammarConstraintFactory({
    tokenizerJson: buildTokenizer().tokenizerJson,
    vocabSize: V,
    eosTokenIds: [EOS],
  })
  const [a, b] = await Promise.all([local.create(personFormat), local.create(personFormat)])
  t.equal(local.compileCount, 1, 'two concurrent identical requests compile once')
  t.not(a, b, 'each request gets its own matcher')
  // The same schema with keys in another order, and LoRAX's json_object+schema, share the grammar.
  const reordered = {
    additionalProperties: false,
    required: PERSON.required,
    type: 'object',
    properties: PERSON.properties,
  }
  await local.create({ type: 'json_schema', name: 'other', schema: reordered, strict: false })
  await local.create({ type: 'json_object', schema: PERSON })
  t.equal(local.compileCount, 1)
  await local.create({ type: 'json_schema', name: 'n', schema: { type: 'integer' }, strict: true })
  t.equal(local.compileCount, 2, 'another schema compiles')
  // Independent matchers: advancing one leaves the other at the start.
  const [open] = tokenizer.encode('{', { addSpecialTokens: false })
  t.ok(a.accept(open!))
  const mask = new Uint32Array(Math.ceil(V / 32))
  b.fillNextTokenMask(mask)
  t.same(
    [...Array(V).keys()].filter((id) => isAllowed(mask, id)),
    [open],
    'b still expects the opening brace',
  )

  const small = new XGrammarConstraintFactory({
    tokenizerJson: buildTokenizer().tokenizerJson,
    vocabSize: V,
    eosTokenIds: [EOS],
    cacheSize: 1,
  })
  const int: ResponseFormat = { type: 'json_schema', name: 'n', schema: { type: 'integer' }, strict: true }
  await small.create(int)
  await small.create(personFormat)
  await small.create(int)
  t.equal(small.compileCount, 3, 'a bounded cache evicts the least recently used grammar')
  small.close()
  await t.rejects(small.create(int), { code: 'server_closing' })
})

t.test('a schema XGrammar cannot compile is a 422 naming the keyword', async (t) => {
  const unsupported: ResponseFormat = {
    type: 'json_schema',
    name: 'bad',
    schema: { type: 'object', properties: { id: { type: 'string', pattern: '(?<=a)b' } }, required: ['id'] },
    strict: true,
  }
  const err: unknown = await factory.create(unsupported).catch((e: unknown) => e)
  t.ok(err instanceof LoomError)
  const loom = err as LoomError
  t.equal(loom.code, 'grammar_unsupported')
  t.equal(loom.status, 422)
  t.equal(loom.param, 'response_format')
  t.match(loom.message, /`pattern`/)
  t.match(loom.message, /Lookbehind is not supported/)
  t.notMatch(loom.message, /\.cc|Aborted/, 'no C++ paths or wasm noise')

  const badType = await factory
    .create({ type: 'json_schema', name: 'bad', schema: { type: 'banana' }, strict: true })
    .then(
      () => null,
      (e: unknown) => e as LoomError,
    )
  t.match(badType?.message, /`type`.*Unsupported type "banana"/)
  const falseSchema = await factory.create({ type: 'json_schema', name: 'bad', schema: false, strict: true }).then(
    () => null,
    (e: unknown) => e as LoomError,
  )
  t.equal(falseSchema?.code, 'grammar_unsupported')

  // The factory moved to a fresh engine instance and still works.
  const out = decode(t, await factory.create(personFormat), 4242, true)
  t.same(validate(JSON.parse(out.text), PERSON), [])
})

t.test('through the real sampler: greedy and seeded sampling stay inside the schema', async (t) => {
  const sampler = new TokenSampler(V)
  const base: SamplingParams = { ...GREEDY_SAMPLING, seed: 7n }
  for (const sampling of [
    base,
    { ...base, temperature: 1, topP: 0.95, seed: 11n },
    { ...base, temperature: 0.8, topK: 40, seed: 12n },
  ]) {
    const constraint = await factory.create(personFormat)
    const state = new SamplingState(sampling, [])
    const rng = new SeededRandom(Number(sampling.seed))
    const ids: number[] = []
    let done = false
    for (let step = 0; step < 600 && !done; step++) {
      const outcome = sampler.sample({
        logits: rng.normalArray(V, 3),
        offset: 0,
        state,
        constraint,
        eosTokenIds: [EOS],
        topLogprobs: 0,
      })
      if (outcome.kind !== 'token') throw new Error(`sampler stopped: ${outcome.kind}`)
      if (outcome.token.id === EOS) done = true
      else ids.push(outcome.token.id)
    }
    t.ok(done, `ends at eos (temperature ${sampling.temperature})`)
    const text = tokenizer.decode(ids, { skipSpecialTokens: true })
    t.same(validate(JSON.parse(text), PERSON), [], text)
  }
})

t.test('a schema that admits no value is refused before any request runs', async (t) => {
  const loops: Schema[] = [{ $ref: '#' }, { $defs: { a: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' }]
  for (const schema of loops) {
    await t.rejects(factory.create({ type: 'json_schema', name: 'loop', schema, strict: true }), {
      code: 'grammar_unsupported',
      param: 'response_format',
      message: /admits no JSON value/,
    })
  }
})
