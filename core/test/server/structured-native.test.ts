import { join } from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

t.test('native /generate honours parameters.response_format next to unconstrained requests', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  await buildModel(modelDir, { seed: 8 })
  const test = await startTestServer(join(dir, 'server'), modelDir)
  t.teardown(() => test.close())
  const schema = {
    type: 'object',
    properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 1, maximum: 9 } },
    required: ['ok', 'n'],
    additionalProperties: false,
  }
  const generate = (parameters: object) =>
    test.server.app.inject({ method: 'POST', url: '/generate', payload: { inputs: 'Answer:', parameters } })
  const [constrained, free] = await Promise.all([
    generate({
      max_new_tokens: 100,
      do_sample: true,
      seed: 4,
      response_format: { type: 'json_schema', schema },
      details: true,
    }),
    generate({ max_new_tokens: 20 }),
  ])
  t.equal(constrained.statusCode, 200)
  const body = constrained.json() as { generated_text: string; details: { finish_reason: string } }
  const value = JSON.parse(body.generated_text) as { ok: unknown; n: unknown }
  t.type(value.ok, 'boolean')
  t.ok(Number.isInteger(value.n) && (value.n as number) >= 1 && (value.n as number) <= 9)
  t.equal(body.details.finish_reason, 'eos_token')
  t.equal(free.statusCode, 200)
  const bad = await generate({ response_format: { type: 'json_schema', schema: { type: 'nope' } } })
  t.equal(bad.statusCode, 422)
  t.match(bad.json(), { error_type: 'validation', error: /response_format cannot be compiled/ })
})
