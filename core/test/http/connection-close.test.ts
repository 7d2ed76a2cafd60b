import { Agent, request } from 'node:http'
import t from 'tap'
import { exchange, listenWithStreams } from './stream-server.ts'

interface Answer {
  readonly status: number
  readonly connection: string | undefined
  readonly body: string
}

function post(port: number, agent: Agent, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', ...headers },
      },
      (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => (body += chunk))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body }))
      },
    )
    req.on('error', reject)
    req.end('{}')
  })
}

t.test('a stream asked to close says so, and a keep-alive agent reuses nothing it closed', async (t) => {
  const port = await listenWithStreams(t)
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  for (const path of ['/generate_stream', '/v1/completions']) {
    const closing = await post(port, agent, path, { connection: 'close' })
    t.equal(closing.status, 200, path)
    t.equal(closing.connection, 'close', `${path}: the stream answers Connection: close`)
    t.match(closing.body, /data: \{"token":"b"\}/)
    // The agent would reuse the socket had the answer said keep-alive; Node's parser refuses any
    // request after `Connection: close`, and this one failed as malformed.
    const next = await post(port, agent, path)
    t.equal(next.status, 200, `${path}: the next request on the same agent succeeds`)
    t.equal(next.connection, 'keep-alive', 'a request that did not ask to close keeps its connection')
  }
})

t.test('an HTTP/1.0 stream closes its connection', async (t) => {
  const port = await listenWithStreams(t)
  const answer = await exchange(
    port,
    'POST /v1/completions HTTP/1.0\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}',
  )
  t.match(answer, /^HTTP\/1\.1 200 OK\r\n/)
  t.match(answer, /\r\nconnection: close\r\n/i)
  t.notMatch(answer, /keep-alive/i)
})

t.test('a request sent anyway after Connection: close is not processed', async (t) => {
  const port = await listenWithStreams(t)
  for (const path of ['/v1/completions', '/generate_stream']) {
    const request = (connection: string) =>
      `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n${connection}\r\n{}`
    // Both requests in one write: the second arrives while the first streams.
    const answer = await exchange(port, request('connection: close\r\n') + request(''))
    t.match(answer, /^HTTP\/1\.1 200 OK\r\n/, `${path}: the stream is whole`)
    t.match(answer, /\r\nconnection: close\r\n/)
    t.match(answer, /data: \{"token":"b"\}\n\n\r\n0\r\n\r\n$/, 'then the server closes, as RFC 9112 asks')
    t.equal(answer.split('HTTP/1.1 ').length, 2, 'one answer only')
  }
})
