import net from 'node:net'
import t from 'tap'
import { INFO, startTestServer } from './app-fixture.ts'

t.test('/health is 503 unhealthy until ready, then 200 with an empty body', async (t) => {
  const server = await startTestServer()
  t.teardown(() => server.app.close())

  const before = await server.app.inject({ method: 'GET', url: '/health' })
  t.equal(before.statusCode, 503)
  t.strictSame(before.json(), { error: 'The model is still loading; retry shortly', error_type: 'unhealthy' })

  server.setReady(true)
  const after = await server.app.inject({ method: 'GET', url: '/health' })
  t.equal(after.statusCode, 200)
  t.equal(after.body, '')
})

t.test('/info is 503 until ready, then the info callback as JSON', async (t) => {
  const server = await startTestServer()
  t.teardown(() => server.app.close())

  const before = await server.app.inject({ method: 'GET', url: '/info' })
  t.equal(before.statusCode, 503)
  t.equal(before.json().error_type, 'unhealthy')

  server.setReady(true)
  const after = await server.app.inject({ method: 'GET', url: '/info' })
  t.equal(after.statusCode, 200)
  t.strictSame(after.json(), INFO)
})

t.test('/metrics is Prometheus text of loom_* metrics with sampled gauges and no secrets', async (t) => {
  const token = 'hf_MetricsShouldNeverSeeThisToken123'
  const server = await startTestServer(() => ({
    runningRequests: 3,
    queuedRequests: 2,
    kvBlocksTotal: 512,
    kvBlocksFree: 100,
    loadedAdapters: 4,
  }))
  t.teardown(() => server.app.close())
  const { metrics } = server
  metrics.requestStarted()
  metrics.requestSucceeded({ durationS: 0.25, queueS: 0.01, inferenceS: 0.2, inputTokens: 12, generatedTokens: 20 })
  metrics.requestFailed('overloaded')
  metrics.authChecked('hub', 'allowed')
  metrics.authChecked(token, 'denied') // a caller passing something secret where a source name belongs
  metrics.adapterDownloaded('s3', 'downloaded', 1.5)
  metrics.batchStep('decode', 3, 0.02, true)

  // Requests carrying the token, to make sure nothing of a request reaches a label.
  await server.app.inject({
    method: 'POST',
    url: `/generate?api_token=${token}`,
    headers: { authorization: `Bearer ${token}` },
    payload: { inputs: 'x', parameters: { api_token: token } },
  })

  const res = await server.app.inject({ method: 'GET', url: '/metrics' })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/)
  const text = res.body
  for (const name of [
    'request_count',
    'request_success',
    'request_failure',
    'request_duration',
    'request_queue_duration',
    'request_input_length',
    'request_generated_tokens',
    'request_skipped_tokens',
    'batch_current_size',
    'queue_length',
    'kv_blocks_free',
    'kv_blocks_total',
    'adapters_loaded',
    'adapter_auth_checks',
  ]) {
    t.match(text, new RegExp(`^# TYPE loom_${name} `, 'm'), `loom_${name}`)
  }
  t.match(text, /^loom_request_count 1$/m)
  t.match(text, /^loom_request_success 1$/m)
  t.match(text, /^loom_request_failure\{err="overloaded"\} 1$/m)
  t.match(text, /^loom_request_generated_tokens_sum 20$/m)
  t.match(text, /^loom_batch_current_size 3$/m)
  t.match(text, /^loom_queue_length 2$/m)
  t.match(text, /^loom_kv_blocks_free 100$/m)
  t.match(text, /^loom_kv_blocks_total 512$/m)
  t.match(text, /^loom_adapters_loaded 4$/m)
  t.match(text, /^loom_adapter_auth_checks\{source="hub",result="allowed"\} 1$/m)
  t.match(text, /^loom_adapter_auth_checks\{source="other",result="denied"\} 1$/m, 'a secret-looking label is `other`')
  t.notMatch(text, /hf_Metrics|Bearer/, 'no token anywhere')
  t.notMatch(text, /^(?!#)(?!loom_)\S/m, 'only loom_ metrics: nothing from the global registry or process')
})

t.test('gauges read 0 while there is nothing to sample', async (t) => {
  const server = await startTestServer(() => undefined)
  t.teardown(() => server.app.close())
  const text = (await server.app.inject({ method: 'GET', url: '/metrics' })).body
  t.match(text, /^loom_kv_blocks_total 0$/m)
})

t.test('two servers in one process keep separate metrics', async (t) => {
  const a = await startTestServer()
  const b = await startTestServer()
  t.teardown(async () => {
    await a.app.close()
    await b.app.close()
  })
  a.metrics.requestStarted()
  t.match(await a.metrics.registry.metrics(), /^loom_request_count 1$/m)
  t.match(await b.metrics.registry.metrics(), /^loom_request_count 0$/m)
})

t.test('routes registered later may stream with @fastify/sse', async (t) => {
  const { app } = await startTestServer()
  t.teardown(() => app.close())
  await app.register(async (scope) => {
    scope.post('/v1/chat/completions', { sse: 'manual' }, async (request, reply) => {
      if ((request.body as { stream?: boolean }).stream !== true) return { id: 'x' }
      await reply.sse.send({ data: { id: 'x', choices: [] } })
      await reply.sse.send('[DONE]')
    })
  })
  const plain = await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: { stream: false } })
  t.strictSame(plain.json(), { id: 'x' })
  const streamed = await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: { stream: true } })
  t.equal(streamed.body, 'data: {"id":"x","choices":[]}\n\ndata: [DONE]\n\n')
})

t.test('requests that arrive while the server closes get server_closing', async (t) => {
  const server = await startTestServer()
  const { app } = server
  server.setReady(true)
  let release!: () => void
  const gate = new Promise<void>((resolve) => (release = resolve))
  app.get('/slow', async () => {
    await gate
    return {}
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0

  // One keep-alive connection: a slow request in flight, then a second request pipelined on it
  // after close() began (a new connection would simply be refused).
  const socket = net.connect(port, '127.0.0.1')
  let received = ''
  socket.on('data', (chunk) => (received += chunk.toString('utf8')))
  const ended = new Promise((resolve) => socket.on('close', resolve))
  socket.write('GET /slow HTTP/1.1\r\nHost: loom\r\n\r\n')
  await new Promise((resolve) => setTimeout(resolve, 50))
  const closed = app.close()
  await new Promise((resolve) => setTimeout(resolve, 20))
  socket.write('GET /health HTTP/1.1\r\nHost: loom\r\n\r\n')
  await new Promise((resolve) => setTimeout(resolve, 20))
  release()
  await closed
  socket.end()
  await ended

  const responses = received.split(/(?=HTTP\/1\.1 )/)
  t.match(responses[0], /^HTTP\/1\.1 200 /, 'the running request finishes')
  t.match(responses[1], /^HTTP\/1\.1 503 /)
  t.match(responses[1], /\{"error":"The server is shutting down","error_type":"unhealthy"\}/)
})
