/**
 * Issue 13, point 5: with the old whitespace rule (any JSON whitespace, runs up to 24) the demo
 * model wrote `{` and then newlines at every gap and ran out of a 120-token budget before closing
 * the object. Compact JSON (at most one space between tokens) is the default: sampled answers
 * (temperature 1, three seeds) to twenty small schemas must all finish and validate in 120 tokens.
 */
import { readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { Ajv2020 } from 'ajv/dist/2020.js'
import { parse, stringify } from 'yaml'
import { loadConfig } from '../../src/config/index.ts'
import { LoomServer } from '../../src/server/loom-server.ts'
import { startTestServer } from '../server/test-server.ts'
import { SMALL_SCHEMAS } from './small-schemas.fixture.ts'

const DEMO_MODEL = fileURLToPath(new URL('../../../models/demo', import.meta.url))
const SEEDS = [1, 2, 3]
const BUDGET = 120

const dir = t.testdir()
const test = await startTestServer(dir, DEMO_MODEL, { logLevel: 'warn', limits: { max_total_tokens: 512 } })
t.teardown(() => test.close())
const ajv = new Ajv2020({ strict: false })

interface Answer {
  readonly label: string
  readonly text: string
  readonly finishReason: string
}

/** A chat request asking for JSON in `responseFormat`, sampled at temperature 1 with `seed`. */
function chat(server: LoomServer, responseFormat: object, seed: number) {
  return server.app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    payload: {
      model: '',
      messages: [{ role: 'user', content: 'Answer in JSON.' }],
      max_tokens: BUDGET,
      temperature: 1,
      seed,
      response_format: responseFormat,
    },
  })
}

/** One chat answer, constrained by `responseFormat`. */
async function ask(server: LoomServer, label: string, responseFormat: object, seed: number): Promise<Answer> {
  const res = await chat(server, responseFormat, seed)
  if (res.statusCode !== 200) throw new Error(`${label}: ${res.statusCode} ${res.body}`)
  const choice = (res.json() as { choices: { message: { content: string }; finish_reason: string }[] }).choices[0]!
  return { label: `${label} seed ${seed}`, text: choice.message.content, finishReason: choice.finish_reason }
}

/** All twenty schemas × three seeds at once (they share decoding steps), `extra` added to each response_format. */
function askSmallSchemas(server: LoomServer, extra: object = {}): Promise<(Answer & { valid: boolean })[]> {
  return Promise.all(
    SMALL_SCHEMAS.flatMap(({ name, schema }) =>
      SEEDS.map(async (seed) => {
        const format = { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true }, ...extra }
        const answer = await ask(server, name, format, seed)
        let valid = false
        try {
          valid = ajv.validate(schema, JSON.parse(answer.text))
        } catch {
          // Not JSON: an answer cut by the budget.
        }
        return { ...answer, valid }
      }),
    ),
  )
}

/** Whether `text` is compact: no whitespace but single spaces outside strings. */
function isCompact(text: string): boolean {
  // Drop the strings (one cut by the budget included), then look at the gaps between tokens.
  const gaps = text.replace(/"(?:[^"\\]|\\.)*(?:"|$)/g, '""')
  return !/[\n\r\t]|  /.test(gaps)
}

t.test('by default, every sampled answer to twenty small schemas finishes and validates in 120 tokens', async (t) => {
  t.equal(SMALL_SCHEMAS.length, 20)
  const answers = await askSmallSchemas(test.server)
  const finished = answers.filter((a) => a.finishReason === 'stop' && a.valid)
  for (const a of answers) {
    if (a.finishReason !== 'stop' || !a.valid) t.fail(`${a.label}: ${a.finishReason}, ${JSON.stringify(a.text)}`)
    else if (!isCompact(a.text)) t.fail(`${a.label}: not compact: ${JSON.stringify(a.text)}`)
  }
  t.equal(finished.length, answers.length, `${finished.length}/${answers.length} finished and valid`)
})

t.test('`whitespace: flexible` keeps the old rule: newlines, and answers that run out of tokens', async (t) => {
  const answers = await askSmallSchemas(test.server, { whitespace: 'flexible' })
  const finished = answers.filter((a) => a.finishReason === 'stop' && a.valid).length
  // Measured: 34 of 60 finish (the rest run out of the budget in blank lines).
  t.ok(finished < answers.length, `${finished}/${answers.length} finished and valid`)
  t.ok(
    answers.some((a) => a.text.includes('\n')),
    'newlines between tokens',
  )
})

t.test('json_object (no schema) is compact too', async (t) => {
  const answers = await Promise.all(SEEDS.map((seed) => ask(test.server, 'json_object', { type: 'json_object' }, seed)))
  for (const a of answers) t.ok(isCompact(a.text), `${a.label}: ${JSON.stringify(a.text.slice(0, 60))}`)
})

t.test('structured_output.json_whitespace: flexible makes the old rule the server default', async (t) => {
  // The YAML the test server was started from, with the key added.
  const config = parse(await readFile(join(dir, 'loom.yaml'), 'utf8')) as Record<string, unknown>
  const file = join(dir, 'flexible.yaml')
  await writeFile(file, stringify({ ...config, structured_output: { json_whitespace: 'flexible' } }))
  const loaded = await loadConfig(file)
  t.equal(loaded.structured_output.json_whitespace, 'flexible')
  t.equal((await loadConfig(join(dir, 'loom.yaml'))).structured_output.json_whitespace, 'compact', 'default: compact')
  const server = await LoomServer.create(loaded)
  t.teardown(() => server.close())
  await server.start()
  const schema = SMALL_SCHEMAS[0]!.schema
  const format = { type: 'json_schema', json_schema: { name: 'answer', schema } }
  const flexible = await Promise.all(SEEDS.map((seed) => ask(server, 'default', format, seed)))
  t.ok(
    flexible.some((a) => a.text.includes('\n')),
    'the server default is flexible',
  )
  const compact = await Promise.all(
    SEEDS.map((seed) => ask(server, 'compact', { ...format, whitespace: 'compact' }, seed)),
  )
  t.ok(
    compact.every((a) => isCompact(a.text)),
    'a request may still ask for compact',
  )
})

t.test('response_format.whitespace must be compact or flexible, on both APIs', async (t) => {
  const openai = await chat(test.server, { type: 'json_object', whitespace: 'pretty' }, 1)
  t.equal(openai.statusCode, 422)
  t.match(openai.json(), {
    error: { param: 'response_format.whitespace', message: /must be one of "compact", "flexible"; received "pretty"/ },
  })
  const native = await test.server.app.inject({
    method: 'POST',
    url: '/generate',
    payload: { inputs: 'x', parameters: { response_format: { type: 'json_object', whitespace: 1 } } },
  })
  t.equal(native.statusCode, 422)
  t.match(native.json(), { error: /parameters\.response_format\.whitespace` must be a string/ })
})
