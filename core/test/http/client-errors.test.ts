import t from 'tap'
import { exchange, listenWithStreams } from './stream-server.ts'

const OPENAI_400 =
  /^HTTP\/1\.1 400 Bad Request\r\n[^]*\r\n\r\n\{"error":\{"message":"Bad request: the HTTP request is malformed","type":"invalid_request_error","param":null,"code":"bad_request"\}\}$/
const NATIVE_400 =
  /^HTTP\/1\.1 400 Bad Request\r\n[^]*\r\n\r\n\{"error":"Bad request: the HTTP request is malformed","error_type":"validation"\}$/

t.test('a request Node cannot parse is refused in the shape of its family', async (t) => {
  const port = await listenWithStreams(t)
  const badHeader = (path: string) => `POST ${path} HTTP/1.1\r\nhost: x\r\nno colon here\r\ncontent-length: 2\r\n\r\n{}`
  t.match(await exchange(port, badHeader('/v1/chat/completions')), OPENAI_400, 'OpenAI shape under /v1')
  t.match(await exchange(port, badHeader('/v1?api_token=x')), OPENAI_400, '/v1 itself, with a query')
  t.match(await exchange(port, badHeader('/generate')), NATIVE_400, 'native shape elsewhere')
  t.match(await exchange(port, badHeader('/v1x')), NATIVE_400, '/v1x is not under /v1')
  t.match(await exchange(port, 'GARBAGE\r\n\r\n'), NATIVE_400, 'native when no path can be read')
})

t.test('bytes past a body come after the answer to it, refused in its family shape', async (t) => {
  // The stream pauses, so the bytes behind its request are parsed (and refused) while it runs.
  const port = await listenWithStreams(t, 100)
  for (const [path, refusal] of [
    ['/v1/completions', OPENAI_400],
    ['/generate_stream', NATIVE_400],
  ] as const) {
    const answer = await exchange(
      port,
      `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"trailing":1}`,
    )
    const cut = answer.lastIndexOf('HTTP/1.1 ')
    t.match(
      answer.slice(0, cut),
      /^HTTP\/1\.1 200 OK\r\n[^]*data: \{"token":"b"\}\n\n\r\n0\r\n\r\n$/,
      `${path}: stream whole`,
    )
    t.match(answer.slice(cut), refusal, `${path}: then the refusal`)
  }
})
