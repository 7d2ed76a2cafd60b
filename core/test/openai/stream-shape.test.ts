import { join } from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { startTestServer } from '../server/test-server.ts'

/** Parse an SSE body into its `data:` payloads. */
function dataLines(body: string): string[] {
  return body
    .split('\n\n')
    .map((event) => event.trim())
    .filter((event) => event.startsWith('data: '))
    .map((event) => event.slice('data: '.length))
}

/** Acceptance (issue 5): a streamed chat response's chunk sequence matches OpenAI's, field by field. */
t.test('chat stream chunks follow OpenAI exactly', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  await buildModel(modelDir, { seed: 12 })
  const test = await startTestServer(join(dir, 'server'), modelDir)
  t.teardown(() => test.close())
  const res = await test.server.app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    payload: {
      model: 'test-model',
      messages: [{ role: 'user', content: 'Count' }],
      max_tokens: 6,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    },
  })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/event-stream/)
  const lines = dataLines(res.body)
  t.equal(lines[lines.length - 1], '[DONE]', 'the stream ends with [DONE]')
  const chunks = lines.slice(0, -1).map((line) => JSON.parse(line) as Record<string, unknown>)
  const first = chunks[0]!
  t.match(first.id, /^chatcmpl-[0-9a-f]{32}$/)
  t.type(first.created, 'number')
  for (const chunk of chunks) {
    t.same(Object.keys(chunk).sort(), ['choices', 'created', 'id', 'model', 'object', 'usage'])
    t.equal(chunk.id, first.id, 'one id for the whole stream')
    t.equal(chunk.object, 'chat.completion.chunk')
    t.equal(chunk.created, first.created)
    t.equal(chunk.model, 'test-model')
  }
  t.same(first.choices, [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }])
  t.equal(first.usage, null)
  const usageChunk = chunks[chunks.length - 1]!
  const finishChunk = chunks[chunks.length - 2]!
  const middle = chunks.slice(1, -2)
  t.ok(middle.length >= 1, 'content chunks between role and finish')
  let text = ''
  for (const chunk of middle) {
    const choices = chunk.choices as {
      index: number
      delta: { content: string }
      logprobs: null
      finish_reason: null
    }[]
    t.equal(choices.length, 1)
    t.same(Object.keys(choices[0]!).sort(), ['delta', 'finish_reason', 'index', 'logprobs'])
    t.same(Object.keys(choices[0]!.delta), ['content'])
    t.equal(choices[0]!.finish_reason, null)
    t.equal(chunk.usage, null)
    text += choices[0]!.delta.content
  }
  t.same(finishChunk.choices, [{ index: 0, delta: {}, logprobs: null, finish_reason: 'length' }])
  t.equal(finishChunk.usage, null)
  t.same(usageChunk.choices, [])
  const usage = usageChunk.usage as { prompt_tokens: number; completion_tokens: number; total_tokens: number }
  t.equal(usage.completion_tokens, 6)
  t.equal(usage.total_tokens, usage.prompt_tokens + 6)

  const whole = await test.server.app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    payload: { model: 'test-model', messages: [{ role: 'user', content: 'Count' }], max_tokens: 6, temperature: 0 },
  })
  t.equal(text, (whole.json() as { choices: { message: { content: string } }[] }).choices[0]!.message.content)

  const plain = await test.server.app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    payload: { model: '', messages: [{ role: 'user', content: 'Count' }], max_tokens: 3, stream: true },
  })
  for (const line of dataLines(plain.body).slice(0, -1)) {
    t.notOk('usage' in (JSON.parse(line) as object), 'no usage field at all without include_usage')
  }
})
