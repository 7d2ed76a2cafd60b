import { request, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { Ajv } from 'ajv'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import {
  CLIENT_HEADERS,
  ERROR_PAYLOAD,
  GENERATE_PAYLOAD,
  STREAM_RESPONSE,
  clientMergedAdapters,
  clientRequest,
  clientStreamPayloads,
} from './lorax-client-shapes.ts'
import { startTestServer, type TestServer } from './test-server.ts'

/**
 * Acceptance (issue 13, point 4): the LoRAX Python client posts every generation to `POST /` with
 * `stream` in the body. Each test sends exactly what the client sends (body and headers) to a real
 * server over HTTP and checks the answer against the client's published types, as it parses them:
 * `payload[0]` of a 200, `StreamResponse` per `data:` line, `{error, error_type}` otherwise.
 */

interface Answer {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

interface Token {
  id: number
  text: string
  logprob: number
  special: boolean
  skipped: boolean
  alternative_tokens?: { id: number; text: string; logprob: number }[]
}

interface Details {
  finish_reason: string
  prompt_tokens: number
  generated_tokens: number
  prefill: { id: number; text: string; logprob: number | null }[]
  tokens: Token[]
}

interface StreamEvent {
  token: Token
  generated_text: string | null
  details: { finish_reason: string; generated_tokens: number } | null
}

const ajv = new Ajv({ allErrors: true, strict: true })
const validGenerate = ajv.compile(GENERATE_PAYLOAD)
const validStreamResponse = ajv.compile(STREAM_RESPONSE)
const validError = ajv.compile(ERROR_PAYLOAD)

/** POST a JSON body as `requests` does, and read the whole answer. */
function post(port: number, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const payload = Buffer.from(JSON.stringify(body))
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/',
        method: 'POST',
        headers: { ...CLIENT_HEADERS, ...headers, 'content-length': payload.length },
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }),
        )
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    req.end(payload)
  })
}

/** `Client.generate`: a 200 whose payload is a one-element list holding a valid `Response`. */
function clientGenerate(t: Test, answer: Answer): { generated_text: string; details: Details } {
  t.equal(answer.status, 200, `200 (${answer.body.slice(0, 200)})`)
  t.match(answer.headers['content-type'], /^application\/json/)
  const payload = JSON.parse(answer.body) as unknown
  if (!validGenerate(payload)) t.fail(`not the client's Response list: ${ajv.errorsText(validGenerate.errors)}`)
  return (payload as { generated_text: string; details: Details }[])[0]!
}

/** `Client.generate_stream`: every `data:` line is a valid `StreamResponse` (else it raises). */
function clientStream(t: Test, answer: Answer): StreamEvent[] {
  t.equal(answer.status, 200, `200 (${answer.body.slice(0, 200)})`)
  t.match(answer.headers['content-type'], /^text\/event-stream/)
  const events = clientStreamPayloads(answer.body)
  for (const event of events) {
    if (!validStreamResponse(event)) {
      t.fail(`not a StreamResponse: ${ajv.errorsText(validStreamResponse.errors)}: ${JSON.stringify(event)}`)
    }
  }
  return events as StreamEvent[]
}

/** `parse_error(status, payload)`: an object with a message and the type that picks the exception. */
function clientError(t: Test, answer: Answer, status: number, errorType: string): string {
  t.equal(answer.status, status, `${status} (${answer.body.slice(0, 200)})`)
  const payload = JSON.parse(answer.body) as { error: string; error_type: string }
  if (!validError(payload)) t.fail(`not the client's error payload: ${ajv.errorsText(validError.errors)}`)
  t.equal(payload.error_type, errorType)
  return payload.error
}

/** Read `/metrics` now: the value of a counter by name (0 before its first increment). */
async function counters(test: TestServer): Promise<(name: string) => number> {
  const text = (await test.server.app.inject({ method: 'GET', url: '/metrics' })).body
  return (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? 0)
}

async function setup(t: Test): Promise<{ test: TestServer; port: number }> {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { hiddenSize: 64, numLayers: 2, seed: 13 })
  const adapters = join(dir, 'adapters')
  await buildLoraAdapter(join(adapters, 'one'), { model: config, rank: 4, seed: 1 })
  await buildLoraAdapter(join(adapters, 'two'), { model: config, rank: 4, seed: 2 })
  const test = await startTestServer(join(dir, 'server'), modelDir, { adapterRoot: adapters })
  t.teardown(() => test.close())
  await test.server.listen({ host: '127.0.0.1', port: 0 })
  return { test, port: (test.server.app.server.address() as AddressInfo).port }
}

t.test("Client.generate: POST / answers the client's Response list, as /generate answers", async (t) => {
  const { test, port } = await setup(t)
  const parameters = { max_new_tokens: 6, ignore_eos_token: true }
  const first = clientGenerate(t, await post(port, clientRequest('hello there', false, parameters)))
  t.equal(first.details.generated_tokens, 6, 'details: true is the client default')
  t.equal(first.details.tokens.length, 6)
  t.notOk('alternative_tokens' in first.details.tokens[0]!, 'no alternatives unless asked')
  t.same(first.details.prefill, [], 'no prefill unless decoder_input_details')
  const native = await test.server.app.inject({
    method: 'POST',
    url: '/generate',
    payload: { inputs: 'hello there', parameters: { ...parameters, details: true } },
  })
  t.same(first, native.json(), 'the same answer as /generate, in a list')

  // `stream` absent is false, as in LoRAX and TGI.
  const { stream: _stream, ...noStream } = clientRequest('hello there', false, parameters)
  t.same(clientGenerate(t, await post(port, noStream)), first, 'absent stream: not streamed')

  const inputDetails = clientGenerate(
    t,
    await post(port, clientRequest('hello there', false, { ...parameters, decoder_input_details: true })),
  )
  t.equal(inputDetails.details.prefill.length, inputDetails.details.prompt_tokens, 'decoder_input_details')

  const noDetails = clientGenerate(t, await post(port, clientRequest('hello there', false, { details: false })))
  t.notOk('details' in noDetails, 'details: false leaves details out')
})

t.test('Client.generate_stream: POST / with stream: true sends the events of /generate_stream', async (t) => {
  const { test, port } = await setup(t)
  const parameters = { max_new_tokens: 6, ignore_eos_token: true }
  const events = clientStream(t, await post(port, clientRequest('hello there', true, parameters)))
  t.equal(events.length, 6, 'one event per token')
  const last = events.at(-1)!
  t.equal(last.details?.generated_tokens, 6, 'the last event carries details')
  t.ok(
    events.slice(0, -1).every((e) => e.generated_text === null && e.details === null),
    'only the last carries text',
  )
  t.equal(last.generated_text, events.map((e) => e.token.text).join(''), 'the token texts make the text')
  const native = await test.server.app.inject({
    method: 'POST',
    url: '/generate_stream',
    payload: { inputs: 'hello there', parameters: { ...parameters, details: true } },
  })
  t.same(clientStreamPayloads(native.body), events, 'the same events as /generate_stream')
  const whole = clientGenerate(t, await post(port, clientRequest('hello there', false, parameters)))
  t.equal(last.generated_text, whole.generated_text, 'the same text as the non-streamed answer')
})

t.test('adapters, merges and tokens as the client sends them', async (t) => {
  const { test, port } = await setup(t)
  const base = clientGenerate(t, await post(port, clientRequest('hello', false, { max_new_tokens: 8 })))
  const adapted = await post(
    port,
    clientRequest('hello', false, { max_new_tokens: 8, adapter_id: 'one', adapter_source: 'local' }),
  )
  const one = clientGenerate(t, adapted)
  t.equal(adapted.headers['x-adapter-id'], 'one')
  t.not(one.details.tokens[0]!.logprob, base.details.tokens[0]!.logprob, 'the adapter changes the logprobs')

  const merged = await post(
    port,
    clientRequest('hello', false, {
      max_new_tokens: 8,
      merged_adapters: clientMergedAdapters(['one', 'two'], [0.5, 0.5], 0),
    }),
  )
  clientGenerate(t, merged)
  t.equal(merged.headers['x-adapter-id'], 'one,two')

  // A private adapter's token in the body (api_token) or in the client's headers: both accepted,
  // never logged.
  const withToken = clientRequest('hello', true, { max_new_tokens: 3, adapter_id: 'one', api_token: 'QA-SECRET-1' })
  clientStream(t, await post(port, withToken))
  const bearer = clientRequest('hello', false, { max_new_tokens: 3, adapter_id: 'two' })
  clientGenerate(t, await post(port, bearer, { authorization: 'Bearer QA-SECRET-2' }))
  t.notOk(
    test.logs.some((l) => l.includes('QA-SECRET')),
    'tokens are not logged',
  )
})

t.test('return_k_alternatives: k alternatives per token, most likely first, with the token among them', async (t) => {
  const { port } = await setup(t)
  const k = 4
  const checkTokens = (t: Test, tokens: Token[], greedy: boolean) => {
    for (const [i, token] of tokens.entries()) {
      const alternatives = token.alternative_tokens ?? []
      t.equal(alternatives.length, k, `token ${i}: ${k} alternatives`)
      t.equal(new Set(alternatives.map((a) => a.id)).size, k, 'distinct tokens')
      for (let j = 1; j < alternatives.length; j++) {
        t.ok(alternatives[j - 1]!.logprob >= alternatives[j]!.logprob, `token ${i}: sorted by logprob`)
      }
      t.ok(alternatives.every((a) => a.logprob <= 0 && typeof a.text === 'string'))
      const own = alternatives.find((a) => a.id === token.id)
      if (greedy) t.equal(alternatives[0]!.id, token.id, `token ${i}: greedy picks the most likely`)
      if (own) t.ok(Math.abs(own.logprob - token.logprob) < 1e-6, `token ${i}: the same logprob as the token`)
      // The token's own logprob comes from the same distribution: it is never above the best
      // alternative, and a token more likely than the k-th alternative is one of them.
      t.ok(token.logprob <= alternatives[0]!.logprob + 1e-6)
      if (token.logprob > alternatives.at(-1)!.logprob + 1e-6) t.ok(own, `token ${i}: listed`)
    }
  }
  const parameters = { max_new_tokens: 6, ignore_eos_token: true, return_k_alternatives: k }
  const greedy = clientGenerate(t, await post(port, clientRequest('the cat', false, parameters)))
  checkTokens(t, greedy.details.tokens, true)
  const sampled = clientGenerate(
    t,
    await post(port, clientRequest('the cat', false, { ...parameters, do_sample: true, seed: 7 })),
  )
  checkTokens(t, sampled.details.tokens, false)

  // AsyncClient.generate_stream sends return_k_alternatives too: LoRAX puts them on each token.
  const events = clientStream(t, await post(port, clientRequest('the cat', true, parameters)))
  checkTokens(
    t,
    events.map((e) => e.token),
    true,
  )
  t.same(
    events.map((e) => e.token.alternative_tokens),
    greedy.details.tokens.map((tk) => tk.alternative_tokens),
    'the stream lists the same alternatives',
  )

  // Bounded like top_logprobs; LoRAX's client and router refuse k <= 0 (0 here means none).
  for (const bad of [21, -1, 1.5]) {
    const message = clientError(
      t,
      await post(port, clientRequest('the cat', false, { return_k_alternatives: bad })),
      422,
      'validation',
    )
    t.match(message, /`parameters.return_k_alternatives` must be an integer >= 0 and <= 20; received/)
  }
})

t.test('errors reach the client in the shape it parses, with the type that picks its exception', async (t) => {
  const { test, port } = await setup(t)
  t.match(
    clientError(t, await post(port, { ...clientRequest('hi', false), stream: 'yes' }), 422, 'validation'),
    /`stream` must be true or false; received "yes"/,
  )
  t.match(clientError(t, await post(port, clientRequest('', false)), 422, 'validation'), /`inputs` cannot be empty/)
  t.match(
    clientError(t, await post(port, clientRequest('hi', true, { decoder_input_details: true })), 422, 'validation'),
    /not supported when streaming/,
  )
  clientError(t, await post(port, clientRequest('hi', true, { adapter_id: 'missing' })), 404, 'not_found')
  // A body the client never sends, but any caller may: still the native error shape.
  const notObject = await post(port, [clientRequest('hi', false)])
  t.match(clientError(t, notObject, 422, 'validation'), /`body` must be/)

  // Counted like /generate and /generate_stream.
  const before = await counters(test)
  clientGenerate(t, await post(port, clientRequest('hi', false, { max_new_tokens: 2 })))
  clientStream(t, await post(port, clientRequest('hi', true, { max_new_tokens: 2 })))
  const after = await counters(test)
  t.equal(after('loom_request_count'), before('loom_request_count') + 2, 'both requests counted')
  t.equal(after('loom_request_success'), before('loom_request_success') + 2, 'both succeeded')
})

type HangUp = 'mid-body' | 'at-once' | 'while-running' | number

/**
 * Send a client request and hang up: while its body is still being sent, at once after it, once
 * the backend runs it, or after reading that many bytes of the answer.
 */
function hangUp(port: number, body: unknown, when: HangUp, running: () => boolean): Promise<void> {
  const payload = Buffer.from(JSON.stringify(body))
  return new Promise((resolve) => {
    const req = request({
      host: '127.0.0.1',
      port,
      path: '/',
      method: 'POST',
      headers: { ...CLIENT_HEADERS, 'content-length': payload.length },
    })
    req.on('error', () => undefined)
    req.on('close', () => resolve())
    req.on('response', (res) => {
      res.on('error', () => undefined)
      let seen = 0
      res.on('data', (chunk: Buffer) => {
        seen += chunk.length
        if (typeof when === 'number' && seen >= when) req.destroy()
      })
    })
    if (when === 'mid-body') {
      req.write(payload.subarray(0, payload.length >> 1), () => setTimeout(() => req.destroy(), 20))
      return
    }
    req.end(payload)
    if (when === 'at-once') req.destroy()
    if (when !== 'while-running') return
    const poll = setInterval(() => {
      if (!running() && !req.destroyed) return
      clearInterval(poll)
      req.destroy()
    }, 1)
  })
}

t.test('the server survives clients that hang up at any moment, and frees what they held', async (t) => {
  const { test, port } = await setup(t)
  const stats = () => test.server.backend.stats()
  const total = stats().kvBlocksTotal
  const long = { max_new_tokens: 200, ignore_eos_token: true }
  const moments: HangUp[] = ['mid-body', 'at-once', 'while-running', 1, 300]
  for (const stream of [false, true]) {
    for (const when of moments) {
      if (!stream && typeof when === 'number') continue // a whole answer comes at once
      const before = await counters(test)
      await hangUp(port, clientRequest('word '.repeat(20), stream, long), when, () => stats().runningRequests > 0)
      for (let i = 0; i < 500 && (stats().runningRequests > 0 || stats().kvBlocksFree < total); i++) await sleep(10)
      t.equal(stats().runningRequests, 0, `stream ${stream}, hang-up ${when}: nothing left running`)
      t.equal(stats().kvBlocksFree, total, `stream ${stream}, hang-up ${when}: every KV block free`)
      const after = await counters(test)
      t.equal(after('loom_request_success'), before('loom_request_success'), 'no request ran to its end')
      if (when === 'while-running' || typeof when === 'number') {
        t.equal(
          after('loom_request_cancelled'),
          before('loom_request_cancelled') + 1,
          'the generation was cancelled, and counted so',
        )
      }
    }
  }
  const last = clientGenerate(t, await post(port, clientRequest('hello', false, { max_new_tokens: 3 })))
  t.equal(last.details.generated_tokens, 3, 'and it still answers')
})
