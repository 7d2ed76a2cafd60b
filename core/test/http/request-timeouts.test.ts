import { Agent, request } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { parseConfig } from '../../src/config/index.ts'
import { startTestServer } from './app-fixture.ts'

// Short timeouts so the test runs in seconds; every gap in the routes below is longer than all of them.
const TIMEOUTS = { headersMs: 300, requestMs: 600, keepAliveMs: 300 }
const GAP_MS = 800

/** A server with the short timeouts and slow routes of both families, on a free loopback port. */
async function listening(t: Test): Promise<{ port: number; logText(): string }> {
  const server = await startTestServer(undefined, { timeouts: TIMEOUTS, sseHeartbeatMs: 0 })
  await server.app.register(async (scope) => {
    for (const url of ['/generate_stream', '/v1/completions']) {
      scope.post(url, { sse: 'manual' }, async (_request, reply) => {
        // Silent gaps longer than every timeout, as a long prefill or a slow model would leave.
        for (const token of ['a', 'b', 'c']) {
          await sleep(GAP_MS)
          await reply.sse.send({ data: { token } })
        }
      })
    }
    scope.post('/generate', async () => {
      await sleep(GAP_MS)
      return { generated_text: 'slow' }
    })
  })
  t.teardown(() => server.app.close())
  await server.app.listen({ host: '127.0.0.1', port: 0 })
  return { port: (server.app.server.address() as AddressInfo).port, logText: server.logText }
}

interface Connection {
  readonly socket: Socket
  /** Everything read until the server closed the connection, and when that was (ms after opening). */
  readonly closed: Promise<{ text: string; afterMs: number }>
}

function open(port: number): Connection {
  const started = Date.now()
  const socket = connect(port, '127.0.0.1')
  let text = ''
  socket.setEncoding('utf8')
  socket.on('data', (chunk: string) => (text += chunk))
  const closed = new Promise<{ text: string; afterMs: number }>((resolve, reject) => {
    socket.on('close', () => resolve({ text, afterMs: Date.now() - started }))
    socket.on('error', reject)
  })
  return { socket, closed }
}

const head = (path: string, length: number) =>
  `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`

t.test('a stalled body gets 408 in its family shape once the request timeout passes', async (t) => {
  const { port, logText } = await listening(t)
  const openai = open(port)
  openai.socket.write(`${head('/v1/completions', 20)}{"prompt":`)
  const native = open(port)
  native.socket.write(`${head('/generate', 20)}{"inputs":`)
  const [o, n] = await Promise.all([openai.closed, native.closed])
  const detail =
    'The request did not arrive in time: the whole request took longer than 0.6 s (server.request_timeout_s)'
  t.match(o.text, /^HTTP\/1\.1 408 Request Timeout\r\n[^]*connection: close\r\n/)
  t.strictSame(JSON.parse(o.text.slice(o.text.indexOf('\r\n\r\n') + 4)), {
    error: { message: detail, type: 'invalid_request_error', param: null, code: 'request_timeout' },
  })
  t.match(n.text, /^HTTP\/1\.1 408 Request Timeout\r\n/)
  t.strictSame(JSON.parse(n.text.slice(n.text.indexOf('\r\n\r\n') + 4)), { error: detail, error_type: 'timeout' })
  for (const { afterMs } of [o, n]) t.ok(afterMs >= 550 && afterMs < 2000, `closed after ${afterMs} ms`)
  t.match(logText(), /"code":"request_timeout"/, 'logged')
})

t.test('a body that dribbles in is cut, though no byte waits longer than any timeout', async (t) => {
  const { port } = await listening(t)
  const conn = open(port)
  conn.socket.write(head('/v1/completions', 100))
  const drip = setInterval(() => conn.socket.write(' '), 100)
  t.teardown(() => clearInterval(drip))
  const { text, afterMs } = await conn.closed
  clearInterval(drip)
  t.match(text, /^HTTP\/1\.1 408 Request Timeout\r\n[^]*"code":"request_timeout"/)
  t.ok(afterMs < 2000, `cut after ${afterMs} ms, not after the 10 s the body would take`)
})

t.test('headers that never finish get 408 after the headers timeout', async (t) => {
  const { port } = await listening(t)
  const partial = open(port)
  partial.socket.write('POST /generate HTTP/1.1\r\nhost: x\r\n')
  const silent = open(port)
  for (const conn of [partial, silent]) {
    const { text, afterMs } = await conn.closed
    t.match(text, /^HTTP\/1\.1 408 Request Timeout\r\n/)
    t.match(
      text,
      /\{"error":"The request did not arrive in time: its headers took longer than 0\.3 s \(server\.headers_timeout_s\)","error_type":"timeout"\}$/,
    )
    t.ok(afterMs >= 250 && afterMs < 2000, `closed after ${afterMs} ms`)
  }
})

t.test('many stalled connections are all closed and the server keeps answering', async (t) => {
  const { port } = await listening(t)
  const stalled = Array.from({ length: 30 }, (_, i) => {
    const conn = open(port)
    conn.socket.write(i % 2 === 0 ? `${head('/v1/completions', 50)}{` : 'POST /generate HTTP/1.1\r\n')
    return conn
  })
  const results = await Promise.all(stalled.map((conn) => conn.closed))
  t.ok(
    results.every(({ text }) => text.startsWith('HTTP/1.1 408 ')),
    'every one answered 408',
  )
  const ok = open(port)
  ok.socket.write(`${head('/generate', 2).replace('\r\n\r\n', '\r\nconnection: close\r\n\r\n')}{}`)
  t.match((await ok.closed).text, /^HTTP\/1\.1 200 OK\r\n/)
})

t.test('an idle kept-alive connection is closed after the keep-alive timeout', async (t) => {
  const { port } = await listening(t)
  const conn = open(port)
  conn.socket.write('GET /health HTTP/1.1\r\nhost: x\r\n\r\n')
  const { text, afterMs } = await conn.closed
  t.match(text, /^HTTP\/1\.1 503 Service Unavailable\r\n[^]*keep-alive: timeout=\d+\r\n/i)
  // Node waits a grace second past the timeout before it closes.
  t.ok(afterMs >= 250 && afterMs < 2500, `closed after ${afterMs} ms`)
})

t.test('an answer takes as long as it needs: slow streams and slow replies are never cut', async (t) => {
  const { port } = await listening(t)
  const agent = new Agent({ keepAlive: true })
  t.teardown(() => agent.destroy())
  const post = (path: string, body: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port, path, method: 'POST', agent, headers: { 'content-type': 'application/json' } },
        (res) => {
          let text = ''
          res.setEncoding('utf8')
          res.on('data', (chunk: string) => (text += chunk))
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }))
          res.on('error', reject)
        },
      )
      req.on('error', reject)
      req.end(body)
    })
  const started = Date.now()
  const [openai, native, slow] = await Promise.all([
    post('/v1/completions', '{"stream":true}'),
    post('/generate_stream', '{"inputs":"hi"}'),
    post('/generate', '{"inputs":"hi"}'),
  ])
  t.ok(Date.now() - started >= 3 * GAP_MS, 'the streams outlived every timeout')
  for (const stream of [openai, native]) {
    t.equal(stream.status, 200)
    t.equal(stream.body, 'data: {"token":"a"}\n\ndata: {"token":"b"}\n\ndata: {"token":"c"}\n\n', 'every event arrived')
  }
  t.strictSame([slow.status, JSON.parse(slow.body)], [200, { generated_text: 'slow' }])
})

t.test('the server has timeouts by default', async (t) => {
  const { app } = await startTestServer()
  t.teardown(() => app.close())
  t.equal(app.server.headersTimeout, 10_000)
  t.equal(app.server.requestTimeout, 60_000)
  t.equal(app.server.keepAliveTimeout, 5_000)
})

t.test('the timeouts are configured under server:, with defaults and checks', async (t) => {
  const base = 'model:\n  id: tiny\n  path: .\nplugins:\n  - use: ./runtime.ts\n'
  const config = (server: string) => parseConfig(`${base}server:\n${server}`, '/srv/loom.yaml', { cwd: '/srv' })
  t.match(config('  port: 3000\n').server, { headers_timeout_s: 10, request_timeout_s: 60, keep_alive_timeout_s: 5 })
  t.match(config('  headers_timeout_s: 0.5\n  request_timeout_s: 2\n  keep_alive_timeout_s: 75\n').server, {
    headers_timeout_s: 0.5,
    request_timeout_s: 2,
    keep_alive_timeout_s: 75,
  })
  t.throws(() => config('  request_timeout_s: 0\n'), {
    code: 'config_invalid',
    message: 'loom.yaml: `server.request_timeout_s` must be > 0; found 0',
  })
  t.throws(() => config('  headers_timeout_s: 90\n'), {
    code: 'config_invalid',
    message:
      'loom.yaml: `server.headers_timeout_s` is invalid: must be <= `server.request_timeout_s` (60), which counts the headers too; found 90',
  })
})
