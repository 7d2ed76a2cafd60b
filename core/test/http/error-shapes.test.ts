import { connect, type AddressInfo } from 'node:net'
import t from 'tap'
import { fieldError, LoomError } from '../../src/errors/index.ts'
import { sendStreamError } from '../../src/http/index.ts'
import { BODY_LIMIT, startTestServer, type TestServer } from './app-fixture.ts'

const NATIVE = '/generate'
const OPENAI = '/v1/chat/completions'

/** Routes added the way later modules add theirs: a plugin registered after createHttpApp. */
async function serverWithRoutes(): Promise<TestServer> {
  const server = await startTestServer()
  await server.app.register(async (scope) => {
    scope.post(NATIVE, { config: { generation: true } }, async () => {
      throw fieldError('parameters.top_p', 'must be > 0 and <= 1', 1.5)
    })
    scope.post(OPENAI, async () => {
      throw fieldError('temperature', 'must be between 0 and 2', 7)
    })
    scope.post('/slots', async () => {
      throw new LoomError('adapter_slots_full', { id: 'acme/poet', detail: 'all 3 slots are pinned' })
    })
    scope.post('/crash', async () => {
      throw new Error('segfault in kernel at 0xdeadbeef')
    })
    scope.post('/v1/crash', async () => {
      throw new TypeError('cannot read properties of undefined')
    })
    scope.post(
      '/schema',
      {
        schema: {
          body: {
            type: 'object',
            required: ['inputs'],
            properties: {
              inputs: { type: 'string' },
              parameters: { type: 'object', properties: { top_p: { type: 'number', maximum: 1 } } },
            },
          },
        },
      },
      async () => ({ ok: true }),
    )
    scope.post('/echo', async (request) => ({ body: request.body as unknown }))
    scope.post('/v1/echo', async (request) => ({ body: request.body as unknown }))
  })
  return server
}

t.test('a validation error has each family its own shape', async (t) => {
  const { app } = await serverWithRoutes()
  t.teardown(() => app.close())

  const native = await app.inject({ method: 'POST', url: NATIVE, payload: { inputs: 'hi' } })
  t.equal(native.statusCode, 422)
  t.match(native.headers['content-type'], /^application\/json/)
  t.strictSame(native.json(), {
    error: 'Input validation error: `parameters.top_p` must be > 0 and <= 1; received 1.5',
    error_type: 'validation',
  })

  const openai = await app.inject({ method: 'POST', url: OPENAI, payload: { messages: [] } })
  t.equal(openai.statusCode, 422)
  t.strictSame(openai.json(), {
    error: {
      message: 'Input validation error: `temperature` must be between 0 and 2; received 7',
      type: 'invalid_request_error',
      param: 'temperature',
      code: 'validation_error',
    },
  })
})

t.test('an unknown route is 404 in the family of its URL, without the query string', async (t) => {
  const { app } = await serverWithRoutes()
  t.teardown(() => app.close())

  const native = await app.inject({ method: 'GET', url: '/nope?api_token=abc' })
  t.equal(native.statusCode, 404)
  t.strictSame(native.json(), { error: 'No route GET /nope', error_type: 'not_found' })

  const openai = await app.inject({ method: 'POST', url: '/v1/embeddings', payload: {} })
  t.equal(openai.statusCode, 404)
  t.strictSame(openai.json(), {
    error: { message: 'No route POST /v1/embeddings', type: 'not_found_error', param: null, code: 'route_not_found' },
  })

  const v1Root = await app.inject({ method: 'GET', url: '/v1' })
  t.equal(v1Root.json().error.code, 'route_not_found', '/v1 itself is the OpenAI family')
})

t.test('a 503 (a capacity or availability condition) is logged as a warning without a stack', async (t) => {
  const server = await serverWithRoutes()
  t.teardown(() => server.app.close())
  const res = await server.app.inject({ method: 'POST', url: '/slots', payload: {} })
  t.equal(res.statusCode, 503)
  const line = server
    .logText()
    .split('\n')
    .find((l) => l.includes('"code":"adapter_slots_full"'))
  t.ok(line, 'logged')
  t.match(JSON.parse(line!), { level: 40, status: 503 })
  t.notMatch(line!, /"stack"/)
})

t.test('a known path with the wrong method is 405 naming the allowed methods', async (t) => {
  const { app } = await serverWithRoutes()
  t.teardown(() => app.close())
  const native = await app.inject({ method: 'GET', url: '/generate?api_token=abc' })
  t.equal(native.statusCode, 405)
  t.equal(native.headers.allow, 'POST')
  t.strictSame(native.json(), { error: 'Method GET is not allowed for /generate; use POST', error_type: 'validation' })
  const openai = await app.inject({ method: 'PUT', url: '/v1/chat/completions' })
  t.equal(openai.statusCode, 405)
  t.match(openai.json(), { error: { code: 'method_not_allowed', type: 'invalid_request_error' } })
})

t.test('valid JSON nested too deeply for the parser is a 400 that says so', async (t) => {
  const { app } = await serverWithRoutes()
  t.teardown(() => app.close())
  const deep = '['.repeat(20000) + ']'.repeat(20000)
  const res = await app.inject({
    method: 'POST',
    url: '/generate',
    headers: { 'content-type': 'application/json' },
    payload: `{"inputs":"hi","x":${deep}}`,
  })
  t.equal(res.statusCode, 400)
  t.strictSame(res.json(), { error: 'Bad request: the JSON body is nested too deeply', error_type: 'validation' })
})

t.test('a request Node cannot frame (body past its Content-Length) gets the native error shape', async (t) => {
  const { app } = await serverWithRoutes()
  t.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      // The first 2 bytes make a whole request (answered 404 first); the rest cannot be framed.
      const body = '{}"inputs":"hi","parameters":{"max_new_tokens":1}}'
      socket.write(
        `POST /nope HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n${body}`,
      )
    })
    let text = ''
    socket.on('data', (chunk) => (text += chunk.toString()))
    socket.on('end', () => resolve(text))
    socket.on('error', reject)
  })
  const last = answer.slice(answer.lastIndexOf('HTTP/1.1 '))
  t.match(last, /^HTTP\/1\.1 400 Bad Request\r\n/)
  t.match(last, /\r\n\r\n\{"error":"Bad request: the HTTP request is malformed","error_type":"validation"\}$/)
})

t.test('malformed JSON is 400 invalid_json and says where, without quoting the body', async (t) => {
  const { app } = await serverWithRoutes()
  t.teardown(() => app.close())
  const payload = '{"inputs": "hi", "parameters": {"api_token": "tok-in-broken-json" oops}}'

  const native = await app.inject({
    method: 'POST',
    url: NATIVE,
    headers: { 'content-type': 'application/json' },
    payload,
  })
  t.equal(native.statusCode, 400)
  t.equal(native.json().error_type, 'validation')
  t.match(native.json().error, /^Request body is not valid JSON: /)
  t.notMatch(native.json().error, /tok-in-broken-json/)

  const openai = await app.inject({
    method: 'POST',
    url: OPENAI,
    headers: { 'content-type': 'application/json' },
    payload,
  })
  t.equal(openai.statusCode, 400)
  t.match(openai.json(), { error: { type: 'invalid_request_error', code: 'invalid_json', param: null } })

  const empty = await app.inject({
    method: 'POST',
    url: NATIVE,
    headers: { 'content-type': 'application/json' },
    payload: '',
  })
  t.equal(empty.statusCode, 400)
  t.equal(empty.json().error, 'Request body is not valid JSON: the body is empty')

  const proto = await app.inject({
    method: 'POST',
    url: '/echo',
    headers: { 'content-type': 'application/json' },
    payload: '{"__proto__": {"isAdmin": true}}',
  })
  t.equal(proto.statusCode, 400)
  t.equal(proto.json().error, 'Request body is not valid JSON: the key `__proto__` is not allowed')
})

t.test('a body that is not JSON is 415 in both families', async (t) => {
  const { app } = await serverWithRoutes()
  t.teardown(() => app.close())

  const native = await app.inject({
    method: 'POST',
    url: NATIVE,
    headers: { 'content-type': 'text/plain' },
    payload: 'hi',
  })
  t.equal(native.statusCode, 415)
  t.strictSame(native.json(), {
    error: 'Unsupported Content-Type "text/plain"; send application/json',
    error_type: 'validation',
  })

  const openai = await app.inject({
    method: 'POST',
    url: OPENAI,
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: 'a=b',
  })
  t.equal(openai.statusCode, 415)
  t.match(openai.json(), { error: { code: 'unsupported_media_type', type: 'invalid_request_error' } })

  const none = await app.inject({ method: 'POST', url: NATIVE, payload: Buffer.from('{}') })
  t.equal(none.statusCode, 415, 'no Content-Type at all')
  t.match(none.json().error, /Unsupported Content-Type \(none\)/)
})

t.test('a body over the configured limit is 413 naming the limit', async (t) => {
  const { app } = await serverWithRoutes()
  t.teardown(() => app.close())
  const payload = JSON.stringify({ inputs: 'x'.repeat(BODY_LIMIT + 1024) })

  const native = await app.inject({
    method: 'POST',
    url: NATIVE,
    headers: { 'content-type': 'application/json' },
    payload,
  })
  t.equal(native.statusCode, 413)
  t.strictSame(native.json(), {
    error: `Request body is larger than the limit of ${BODY_LIMIT} bytes`,
    error_type: 'validation',
  })

  const openai = await app.inject({
    method: 'POST',
    url: OPENAI,
    headers: { 'content-type': 'application/json' },
    payload,
  })
  t.equal(openai.statusCode, 413)
  t.match(openai.json(), { error: { code: 'body_too_large', message: /1048576 bytes/ } })

  const fits = await app.inject({
    method: 'POST',
    url: '/echo',
    payload: { inputs: 'x'.repeat(BODY_LIMIT - 100) },
  })
  t.equal(fits.statusCode, 200, 'a body just under the limit is accepted')
})

t.test('fastify schema errors become validation_error naming the field and the value', async (t) => {
  const { app } = await serverWithRoutes()
  t.teardown(() => app.close())

  const missing = await app.inject({ method: 'POST', url: '/schema', payload: { parameters: {} } })
  t.equal(missing.statusCode, 422)
  t.strictSame(missing.json(), {
    error: 'Input validation error: `inputs` is required; received nothing',
    error_type: 'validation',
  })

  const tooBig = await app.inject({
    method: 'POST',
    url: '/schema',
    payload: { inputs: 'a', parameters: { top_p: 1.5 } },
  })
  t.equal(tooBig.statusCode, 422)
  t.equal(tooBig.json().error, 'Input validation error: `parameters.top_p` must be <= 1; received 1.5')
})

t.test('an unexpected error is 500 internal_error quoting only the request id', async (t) => {
  const server = await serverWithRoutes()
  const { app } = server
  t.teardown(() => app.close())

  const native = await app.inject({ method: 'POST', url: '/crash', payload: {} })
  t.equal(native.statusCode, 500)
  const requestId = native.headers['x-request-id']
  t.type(requestId, 'string')
  t.strictSame(native.json(), { error: `Internal error (request id ${String(requestId)})`, error_type: 'internal' })
  t.notMatch(native.body, /segfault|deadbeef|at /, 'no message or stack reaches the client')
  t.match(server.logText(), /segfault in kernel at 0xdeadbeef/, 'the log has the real error')
  t.match(server.logText(), new RegExp(`"reqId":"${String(requestId)}"`), 'under the same request id')

  const openai = await app.inject({
    method: 'POST',
    url: '/v1/crash',
    payload: {},
    headers: { 'x-request-id': 'client-42' },
  })
  t.equal(openai.statusCode, 500)
  t.equal(openai.headers['x-request-id'], 'client-42', 'a plain client request id is kept')
  t.strictSame(openai.json(), {
    error: {
      message: 'Internal error (request id client-42)',
      type: 'server_error',
      param: null,
      code: 'internal_error',
    },
  })

  const weird = await app.inject({
    method: 'GET',
    url: '/health',
    headers: { 'x-request-id': 'has spaces and ; stuff' },
  })
  t.not(weird.headers['x-request-id'], 'has spaces and ; stuff', 'an odd client request id is replaced')
})

t.test('generation routes are counted, failures by error type', async (t) => {
  const server = await serverWithRoutes()
  t.teardown(() => server.app.close())
  await server.app.inject({ method: 'POST', url: NATIVE, payload: {} })
  await server.app.inject({ method: 'POST', url: OPENAI, payload: {} })
  const text = await server.metrics.registry.metrics()
  t.match(text, /^loom_request_count 1$/m, 'only the route marked `generation` counts')
  t.match(text, /^loom_request_failure\{err="validation"\} 1$/m)
})

t.test('errors after a stream started are sent as a data event in the family shape', async (t) => {
  const { app } = await startTestServer()
  t.teardown(() => app.close())
  await app.register(async (scope) => {
    for (const url of ['/generate_stream', '/v1/completions']) {
      scope.post(url, { sse: 'manual' }, async (request, reply) => {
        await reply.sse.send({ data: { token: { id: 1, text: 'a' } } })
        await sendStreamError(request, reply, new LoomError('generation_error', { detail: 'engine stopped' }))
      })
    }
    scope.post('/v1/throws-mid-stream', { sse: 'manual' }, async (_request, reply) => {
      await reply.sse.send({ data: { choices: [] } })
      throw new Error('lost the device')
    })
  })

  const native = await app.inject({ method: 'POST', url: '/generate_stream', payload: {} })
  t.equal(native.statusCode, 200)
  t.match(native.headers['content-type'], /^text\/event-stream/)
  t.equal(
    native.body,
    'data: {"token":{"id":1,"text":"a"}}\n\n' +
      'data: {"error":"Request failed during generation: engine stopped","error_type":"generation"}\n\n',
  )

  const openai = await app.inject({ method: 'POST', url: '/v1/completions', payload: {} })
  const events = openai.body.split('\n\n').filter((e) => e !== '')
  t.equal(events.length, 2)
  t.strictSame(JSON.parse(events[1]!.replace(/^data: /, '')), {
    error: {
      message: 'Request failed during generation: engine stopped',
      type: 'server_error',
      param: null,
      code: 'generation_error',
    },
  })

  const thrown = await app.inject({ method: 'POST', url: '/v1/throws-mid-stream', payload: {} })
  t.equal(thrown.statusCode, 200, 'the status line was already sent')
  t.match(thrown.body, /^data: \{"choices":\[\]\}\n\n/)
  t.notMatch(thrown.body, /lost the device/, 'no internal detail on the wire')
})
