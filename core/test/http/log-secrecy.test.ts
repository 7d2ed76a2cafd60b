import t from 'tap'
import { startTestServer } from './app-fixture.ts'

// Tokens in a well-known format and in none at all: the second can only be caught by field names
// and by the patterns around it (`Bearer`, `api_token=`), never by its own look.
const HUB_TOKEN = 'hf_kPqRsTuVwXyZaBcDeFgHiJkLmNoPq12345'
const PLAIN_TOKEN = 'Zq7-plain-token-that-looks-like-nothing-9x'

t.test('no token reaches the log, whatever the request and whatever fails', async (t) => {
  const server = await startTestServer()
  const { app } = server
  t.teardown(() => app.close())
  await app.register(async (scope) => {
    for (const url of ['/generate', '/v1/chat/completions']) {
      scope.post(url, async (request) => {
        // What a careless route might log: the whole body and the headers.
        request.log.info({ body: request.body, headers: request.headers }, 'request received')
        request.log.debug(request.body as object, 'body as the merge object')
        const token = (request.body as { api_token?: string }).api_token ?? ''
        // An upstream failure quoting the URL and the header it sent.
        throw new Error(
          `GET https://hub.example/api/models/x?api_token=${token} failed: 401 for Authorization: Bearer ${token}`,
        )
      })
    }
  })

  for (const token of [HUB_TOKEN, PLAIN_TOKEN]) {
    const body = { inputs: 'hello', api_token: token, parameters: { api_token: token, adapter_id: 'org/adapter' } }
    for (const url of ['/generate', '/v1/chat/completions']) {
      const res = await app.inject({
        method: 'POST',
        url,
        headers: { authorization: `Bearer ${token}`, 'x-api-key': token },
        payload: body,
      })
      t.equal(res.statusCode, 500)
      t.notMatch(res.body, token, 'not in the response either')
    }
    // Framework-level failures with the token in the body or the query string.
    await app.inject({
      method: 'POST',
      url: '/generate',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      payload: `{"inputs": "x", "api_token": "${token}", oops}`,
    })
    await app.inject({
      method: 'GET',
      url: `/nowhere?api_token=${token}`,
      headers: { authorization: `Bearer ${token}` },
    })
    await app.inject({
      method: 'POST',
      url: `/generate?api_token=${token}`,
      headers: { 'content-type': 'text/plain' },
      payload: token,
    })
  }

  const log = server.logText()
  t.match(log, /"msg":"request received"/, 'the route did log the body')
  t.match(log, /"msg":"unhandled error"/, 'the error was logged')
  t.match(log, /"msg":"incoming request"/, "fastify's request logging is on")
  t.match(log, /\[Redacted\]/)
  t.notMatch(log, HUB_TOKEN, 'the hub token never appears')
  t.notMatch(log, PLAIN_TOKEN, 'the plain token never appears')
  t.notMatch(log, /hf_kPqRs|Zq7-plain/, 'not even in part')
})
