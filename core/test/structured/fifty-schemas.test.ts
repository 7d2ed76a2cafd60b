/**
 * Issue 5, acceptance 2: fifty JSON schemas decoded by a random tiny "model" (seeded random
 * logits over the testkit vocabulary) through the real sampler, masked by the schema's
 * constraint. Every run that ends at eos must parse and validate with ajv; most runs must end at
 * eos within the budget, so the check cannot pass by never finishing.
 */
import t from 'tap'
import { Ajv2020 } from 'ajv/dist/2020.js'
import { SeededRandom } from '@loom/testkit'
import { GREEDY_SAMPLING, type SamplingParams } from '../../src/contracts/sampling.ts'
import { SamplingState, TokenSampler } from '../../src/engine/index.ts'
import type { LoomError } from '../../src/errors/index.ts'
import { FIFTY_SCHEMAS } from './fifty-schemas.fixture.ts'
import { paddedModel } from './padded-model.fixture.ts'

const BUDGET = 400

const { vocabSize: V, eos: EOS, tokenizer, factory } = await paddedModel(t.testdir())
const sampler = new TokenSampler(V)
const ajv = new Ajv2020({ allErrors: true, strict: true })

const GREEDY: SamplingParams = GREEDY_SAMPLING
/** Two greedy and two sampled (temperature 1) runs per schema, each with its own logits stream. */
const RUNS: readonly SamplingParams[] = [
  { ...GREEDY, seed: 1n },
  { ...GREEDY, seed: 2n },
  { ...GREEDY, temperature: 1, seed: 3n },
  { ...GREEDY, temperature: 1, seed: 4n },
]

interface Run {
  readonly text: string
  readonly endedAtEos: boolean
}

async function decode(schema: unknown, sampling: SamplingParams, logitSeed: number): Promise<Run> {
  const constraint = await factory.create({ type: 'json_schema', name: 's', schema, strict: true })
  try {
    const state = new SamplingState(sampling, [])
    const logits = new SeededRandom(logitSeed)
    const ids: number[] = []
    for (let step = 0; step < BUDGET; step++) {
      const outcome = sampler.sample({
        logits: logits.normalArray(V, 3),
        offset: 0,
        state,
        constraint,
        eosTokenIds: [EOS],
        topLogprobs: 0,
      })
      if (outcome.kind !== 'token') throw new Error(`the sampler stopped: ${outcome.kind}`)
      if (outcome.token.id === EOS)
        return { text: tokenizer.decode(ids, { skipSpecialTokens: true }), endedAtEos: true }
      ids.push(outcome.token.id)
    }
    return { text: tokenizer.decode(ids, { skipSpecialTokens: true }), endedAtEos: false }
  } finally {
    constraint.dispose()
  }
}

t.after(() => factory.close())

t.test('fifty schemas: every output that ends at eos parses and validates', async (t) => {
  t.equal(FIFTY_SCHEMAS.length, 50, 'fifty schemas')
  t.equal(new Set(FIFTY_SCHEMAS.map((c) => c.name)).size, 50, 'distinct names')
  let runs = 0
  let ended = 0
  for (const [index, { name, schema }] of FIFTY_SCHEMAS.entries()) {
    const validate = ajv.compile(schema)
    for (const [r, sampling] of RUNS.entries()) {
      const run = await decode(schema, sampling, 1000 * index + r)
      runs++
      if (!run.endedAtEos) continue
      ended++
      let value: unknown
      try {
        value = JSON.parse(run.text)
      } catch {
        t.fail(`${name} run ${r}: not JSON: ${JSON.stringify(run.text)}`)
        continue
      }
      if (!validate(value)) t.fail(`${name} run ${r}: ${ajv.errorsText(validate.errors)}: ${run.text}`)
    }
  }
  t.ok(ended >= 0.9 * runs, `${ended} of ${runs} runs ended at eos within ${BUDGET} tokens`)
})

t.test('what cannot be honoured exactly is a 422 naming the keyword', async (t) => {
  const cases: [unknown, string][] = [
    [{ type: 'integer', multipleOf: 5 }, 'multipleOf'],
    [{ oneOf: [{ type: 'integer' }, { type: 'number' }] }, 'oneOf'],
    [{ type: 'array', items: { type: 'integer' }, uniqueItems: true }, 'uniqueItems'],
    [{ type: 'integer', minimum: 1e16 }, 'minimum/maximum'],
    [{ type: 'number', minimum: 3, maximum: 2 }, 'minimum/maximum'],
    [{ type: 'string', pattern: '^ab|cd$' }, 'pattern'],
  ]
  for (const [schema, keyword] of cases) {
    const err = await factory.create({ type: 'json_schema', name: 's', schema, strict: true }).then(
      () => null,
      (e: unknown) => e as LoomError,
    )
    t.equal(err?.code, 'grammar_unsupported', JSON.stringify(schema))
    t.match(err?.message, `\`${keyword}\``)
  }
})
