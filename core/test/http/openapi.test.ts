import { join } from 'node:path'
import t, { type Test } from 'tap'
import { buildLoraAdapter } from '@loom/testkit'
import { startSdkServer, type SdkTestServer } from '../openai/sdk-test-server.ts'
import {
  DocumentSchemas,
  mediaTypes,
  references,
  resolvePointer,
  servedRoutes,
  sseData,
  type OpenApiDocument,
} from './openapi-checks.ts'
import { OPENAPI_31_STRUCTURE } from './openapi-structure.ts'
import { Ajv2020 } from 'ajv/dist/2020.js'

/**
 * Issue 18, point 4: `GET /openapi.json` is a valid OpenAPI 3.1 document that covers every route
 * the server serves; its examples validate against their schemas; and real answers of a real
 * server (every route, successes and errors, JSON and event streams) validate against the schema
 * the document gives for their route, status and content type.
 */

/** A testkit model with one LoRA adapter (`poet`), served on loopback. */
async function serve(t: Test): Promise<SdkTestServer> {
  const served = await startSdkServer(t.testdir(), {
    prepare: (modelDir, config) => buildLoraAdapter(join(modelDir, 'poet'), { model: config, rank: 4, seed: 5 }),
    server: { preload: [{ id: 'poet' }] },
  })
  t.teardown(() => served.test.close())
  return served
}

async function documentOf(served: SdkTestServer): Promise<OpenApiDocument> {
  const answer = await fetch(`${served.baseUrl}/openapi.json`)
  if (answer.status !== 200) throw new Error(`/openapi.json answered ${answer.status}`)
  return (await answer.json()) as OpenApiDocument
}

/** A route's path as the document writes it: `{name}` for `:name` and for fastify's `*`. */
function documentedPath(path: string): string {
  return path.replace(/:(\w+)/g, '{$1}').replace(/\*$/, '{id}')
}

t.test('the document', async (t) => {
  const served = await serve(t)
  const doc = await documentOf(served)
  const schemas = new DocumentSchemas(doc)

  t.test('is an OpenAPI 3.1 document', async (t) => {
    // strictRequired off: `anyOf: [{required: ['paths']}, …]` names fields defined one level up.
    const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false, allowUnionTypes: true })
    const validate = ajv.compile(OPENAPI_31_STRUCTURE)
    t.equal(validate(doc) ? null : ajv.errorsText(validate.errors), null, 'the structure of an OpenAPI 3.1 document')
    t.equal(doc.openapi, '3.1.0')
    // The structural check has teeth: a response without its description, or an unknown field, fails.
    const broken = structuredClone(doc) as unknown as {
      paths: Record<string, { get: { responses: Record<string, { description?: string }> } }>
    }
    delete broken.paths['/health']!.get.responses['200']!.description
    t.notOk(validate(broken), 'a response without a description is refused')
    t.notOk(
      validate({ ...doc, paths: { '/x': { get: { responses: { 200: { description: 'x' } }, nonsense: 1 } } } }),
      'unknown fields are refused',
    )
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      t.equal(schemas.metaCheck(schema), null, `components.schemas.${name} is a JSON Schema 2020-12`)
    }
    const unresolved = [...new Set(references(doc))].filter((r) => resolvePointer(doc, r) === undefined)
    t.same(unresolved, [], 'every $ref resolves')
    const ids = Object.values(doc.paths).flatMap((item) => Object.values(item).map((op) => op.operationId))
    t.equal(new Set(ids).size, ids.length, 'operationIds are unique')
    t.notOk(ids.includes(undefined), 'every operation has an operationId')
  })

  t.test('covers every route the server serves, and no other', async (t) => {
    const served_ = servedRoutes(served.test.server.app.printRoutes({ commonPrefix: false }))
    // HEAD is fastify's automatic twin of each GET; /docs/* is Swagger UI itself (its page and assets).
    const expected = served_
      .filter((r) => !r.startsWith('HEAD ') && !/^\w+ \/docs(\/|$)/.test(r))
      .map((r) => {
        const [method, path] = r.split(' ') as [string, string]
        return `${method} ${documentedPath(path)}`
      })
    const documented = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`),
    )
    t.same(documented.sort(), [...new Set(expected)].sort())
    t.ok(served_.includes('GET /docs'), 'Swagger UI is served at /docs')
  })

  t.test('its examples validate against their schemas', async (t) => {
    let count = 0
    for (const { where, type, media } of mediaTypes(doc)) {
      const examples = [
        ...(media.example === undefined ? [] : [media.example]),
        ...Object.values(media.examples ?? {}).map((e) => e.value),
      ]
      t.ok(examples.length > 0 || type === 'application/json', `${where} ${type} has an example`)
      for (const example of examples) {
        count++
        if (type !== 'text/event-stream') {
          t.equal(
            schemas.check(media.schema, example),
            null,
            `${where} ${type}: ${JSON.stringify(example).slice(0, 80)}`,
          )
          continue
        }
        const events = sseData(example as string)
        t.ok(events.length > 0, `${where}: the example is an event stream`)
        for (const data of events.filter((d) => d !== '[DONE]')) {
          t.equal(
            schemas.check(media['x-sse-data-schema'], JSON.parse(data)),
            null,
            `${where} event: ${data.slice(0, 80)}`,
          )
        }
      }
    }
    // Schema-level `examples` (components and their properties) hold real values too.
    const walk = function* (schema: unknown, where: string): Iterable<[string, unknown, unknown]> {
      if (typeof schema !== 'object' || schema === null) return
      const s = schema as Record<string, unknown>
      if (Array.isArray(s.examples)) for (const e of s.examples) yield [where, s, e]
      for (const [key, sub] of Object.entries(s.properties ?? {})) yield* walk(sub, `${where}.${key}`)
    }
    for (const [name, component] of Object.entries(doc.components.schemas)) {
      for (const [where, schema, example] of walk(component, name)) {
        count++
        t.equal(schemas.check(schema, example), null, `${where} example ${JSON.stringify(example).slice(0, 60)}`)
      }
    }
    t.ok(count > 40, `${count} examples checked`)
  })

  t.test("error responses are each family's shape, with the registry's statuses", async (t) => {
    for (const [path, item] of Object.entries(doc.paths)) {
      const family = path.startsWith('/v1/') ? 'OpenAiError' : 'NativeError'
      for (const [method, op] of Object.entries(item)) {
        const statuses = Object.keys(op.responses)
        t.ok(statuses.includes('200'), `${method} ${path} documents its 200`)
        t.ok(statuses.includes('503') && statuses.includes('500'), `${method} ${path}: 500 and 503 (draining)`)
        for (const status of statuses.filter((s) => Number(s) >= 400)) {
          const media = op.responses[status]!.content?.['application/json']
          t.same(media?.schema, { $ref: `#/components/schemas/${family}` }, `${method} ${path} ${status}`)
        }
      }
    }
    const generate = Object.keys(doc.paths['/generate']!.post!.responses)
    t.same(generate, ['200', '400', '401', '403', '404', '408', '413', '415', '422', '429', '500', '502', '503'])
  })
})

interface Answer {
  readonly status: number
  readonly type: string
  readonly body: string
}

async function call(
  served: SdkTestServer,
  method: string,
  path: string,
  body?: unknown,
  raw?: string,
): Promise<Answer> {
  const answer = await fetch(`${served.baseUrl}${path}`, {
    method,
    ...(body === undefined && raw === undefined
      ? {}
      : { headers: { 'content-type': 'application/json' }, body: raw ?? JSON.stringify(body) }),
  })
  const type = (answer.headers.get('content-type') ?? '').split(';')[0]!.trim()
  return { status: answer.status, type, body: await answer.text() }
}

t.test('real answers validate against the documented responses', async (t) => {
  const served = await serve(t)
  const doc = await documentOf(served)
  const schemas = new DocumentSchemas(doc)
  const prompt = 'hello there'

  /** Call a route and check its answer against the document: status, content type, body. */
  async function check(method: string, path: string, docPath: string, expected: number, body?: unknown, raw?: string) {
    const answer = await call(served, method, path, body, raw)
    const label = `${method} ${path} ${JSON.stringify(body ?? raw ?? '').slice(0, 70)}`
    t.equal(answer.status, expected, `${label}: ${answer.status} (${answer.body.slice(0, 160)})`)
    const documented = doc.paths[docPath]?.[method.toLowerCase()]?.responses[String(answer.status)]
    if (!documented) return t.fail(`${label}: status ${answer.status} is not documented`)
    if (answer.body === '') return t.equal(documented.content, undefined, `${label}: documented without a body`)
    const media = documented.content?.[answer.type]
    if (!media) return t.fail(`${label}: ${answer.type} is not documented for ${answer.status}`)
    if (answer.type === 'text/event-stream') {
      const events = sseData(answer.body).filter((d) => d !== '[DONE]')
      t.ok(events.length > 0, `${label}: events`)
      for (const data of events) {
        t.equal(
          schemas.check(media['x-sse-data-schema'], JSON.parse(data)),
          null,
          `${label} event ${data.slice(0, 60)}`,
        )
      }
      return
    }
    const value = answer.type === 'application/json' ? JSON.parse(answer.body) : answer.body
    t.equal(schemas.check(media.schema, value), null, label)
  }

  const details = { details: true, decoder_input_details: true, return_k_alternatives: 2, do_sample: true, seed: 7 }
  await check('GET', '/health', '/health', 200)
  await check('GET', '/info', '/info', 200)
  await check('GET', '/metrics', '/metrics', 200)
  await check('GET', '/openapi.json', '/openapi.json', 200)

  await check('POST', '/generate', '/generate', 200, { inputs: prompt, parameters: { max_new_tokens: 3, ...details } })
  await check('POST', '/generate', '/generate', 200, {
    inputs: prompt,
    parameters: { max_new_tokens: 2, adapter_id: 'poet' },
  })
  await check('POST', '/generate_stream', '/generate_stream', 200, {
    inputs: prompt,
    parameters: { max_new_tokens: 3, details: true, return_k_alternatives: 1 },
  })
  await check('POST', '/', '/', 200, { inputs: prompt, parameters: { max_new_tokens: 2, details: true } })
  await check('POST', '/', '/', 200, { inputs: prompt, stream: true, parameters: { max_new_tokens: 2 } })
  await check('POST', '/generate', '/generate', 422, { inputs: prompt, parameters: { top_p: 1.5 } })
  await check('POST', '/generate', '/generate', 404, { inputs: prompt, parameters: { adapter_id: 'nope' } })
  await check('POST', '/generate_stream', '/generate_stream', 400, undefined, '{"inputs": ')

  const chat = { model: '', messages: [{ role: 'user', content: prompt }], max_tokens: 3 }
  await check('POST', '/v1/chat/completions', '/v1/chat/completions', 200, { ...chat, logprobs: true, top_logprobs: 2 })
  await check('POST', '/v1/chat/completions', '/v1/chat/completions', 200, { ...chat, model: 'poet', n: 2 })
  await check('POST', '/v1/chat/completions', '/v1/chat/completions', 200, {
    ...chat,
    stream: true,
    logprobs: true,
    stream_options: { include_usage: true },
  })
  await check('POST', '/v1/chat/completions', '/v1/chat/completions', 422, { ...chat, temperature: 7 })
  await check('POST', '/v1/chat/completions', '/v1/chat/completions', 404, { ...chat, model: 'nope' })

  const completion = { model: '', prompt, max_tokens: 3 }
  await check('POST', '/v1/completions', '/v1/completions', 200, { ...completion, logprobs: 2, echo: true })
  await check('POST', '/v1/completions', '/v1/completions', 200, { ...completion, prompt: [prompt, 'again'], n: 2 })
  await check('POST', '/v1/completions', '/v1/completions', 200, {
    ...completion,
    stream: true,
    logprobs: 1,
    stream_options: { include_usage: true },
  })
  await check('POST', '/v1/completions', '/v1/completions', 422, { ...completion, suffix: 'x' })

  await check('GET', '/v1/models', '/v1/models', 200)
  await check('GET', '/v1/models/poet', '/v1/models/{id}', 200)
  await check('GET', '/v1/models/test-model', '/v1/models/{id}', 200)
  await check('GET', '/v1/models/nope', '/v1/models/{id}', 404)
})

t.test("the documents are declared for documentation only: requests keep Loom's parsers", async (t) => {
  const served = await serve(t)
  // ajv would report `body/parameters/top_p must be <= 1`; Loom's parser names field, limit and value.
  const answer = await call(served, 'POST', '/generate', { inputs: 'x', parameters: { top_p: 1.5 } })
  t.same(JSON.parse(answer.body), {
    error: 'Input validation error: `parameters.top_p` must be a number > 0 and <= 1; received 1.5',
    error_type: 'validation',
  })
  // No response serializer strips what the schemas leave out.
  const info = JSON.parse((await call(served, 'GET', '/info')).body) as Record<string, unknown>
  t.ok('speculator' in info && 'backend' in info)
})
