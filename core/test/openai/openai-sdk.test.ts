import type { AddressInfo } from 'node:net'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import OpenAI from 'openai'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from '../server/test-server.ts'

const authPlugin = fileURLToPath(new URL('./fixtures-auth-plugin.ts', import.meta.url))

/**
 * Acceptance (issue 5): a real server driven by the official `openai` SDK (v6) — chat and
 * completions, streaming and not, multi-turn, adapters via `model`, `n` > 1, `stop` as string and
 * array, usage in streams, and the SDK's typed errors for 404, 401, 422 and 429.
 */
t.test('the OpenAI SDK works against Loom', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { seed: 21, maxPositionEmbeddings: 1024 })
  await buildLoraAdapter(join(modelDir, 'adapters', 'poet'), { model: config, seed: 5, initScale: 0.5 })
  await buildLoraAdapter(join(modelDir, 'adapters', 'private'), { model: config, seed: 6 })
  const serverDir = join(dir, 'server')
  const test = await startTestServer(serverDir, modelDir, {
    adapterRoot: join(modelDir, 'adapters'),
    limits: { max_concurrent_requests: 4, max_total_tokens: 1024 },
    plugins: [{ use: `./${relative(serverDir, authPlugin)}`, options: { token: 'right-token', protect: 'private' } }],
  })
  t.teardown(() => test.close())
  await test.server.listen({ host: '127.0.0.1', port: 0 })
  const { port } = test.server.app.server.address() as AddressInfo
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'any-key', maxRetries: 0 })
  const greedy = { temperature: 0, max_tokens: 12 } as const
  const user = (content: string) => [{ role: 'user' as const, content }]

  t.test('chat, not streaming: shapes, usage, base model by "" and by its id', async (t) => {
    const res = await client.chat.completions.create({ model: '', messages: user('Hello there'), ...greedy })
    t.match(res.id, /^chatcmpl-/)
    t.equal(res.object, 'chat.completion')
    t.equal(res.model, 'test-model', 'the base model is reported by its served id')
    t.equal(res.choices.length, 1)
    t.equal(res.choices[0]!.message.role, 'assistant')
    t.type(res.choices[0]!.message.content, 'string')
    t.ok(['stop', 'length'].includes(res.choices[0]!.finish_reason))
    t.equal(res.usage!.total_tokens, res.usage!.prompt_tokens + res.usage!.completion_tokens)
    const byId = await client.chat.completions.create({ model: 'test-model', messages: user('Hello there'), ...greedy })
    t.equal(byId.choices[0]!.message.content, res.choices[0]!.message.content, 'the served id is the base model too')
  })

  t.test('chat streaming: role first, deltas, finish, usage chunk; text equals the non-streamed text', async (t) => {
    const whole = await client.chat.completions.create({ model: '', messages: user('Stream this'), ...greedy })
    const stream = await client.chat.completions.create({
      model: '',
      messages: user('Stream this'),
      ...greedy,
      stream: true,
      stream_options: { include_usage: true },
    })
    const chunks = []
    for await (const chunk of stream) chunks.push(chunk)
    t.equal(chunks[0]!.choices[0]!.delta.role, 'assistant')
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')
    t.equal(text, whole.choices[0]!.message.content)
    const finish = chunks.find((c) => c.choices[0]?.finish_reason)
    t.equal(finish?.choices[0]!.finish_reason, whole.choices[0]!.finish_reason)
    const last = chunks[chunks.length - 1]!
    t.same(last.choices, [])
    t.same(last.usage, whole.usage)
  })

  t.test('multi-turn conversations and adapters selected by `model`', async (t) => {
    const turns = [
      { role: 'system' as const, content: 'You are terse.' },
      { role: 'user' as const, content: 'Hi' },
      { role: 'assistant' as const, content: 'Hello.' },
      { role: 'user' as const, content: 'Tell me more' },
    ]
    const one = await client.chat.completions.create({ model: '', messages: user('Tell me more'), ...greedy })
    const multi = await client.chat.completions.create({ model: '', messages: turns, ...greedy })
    t.ok(multi.usage!.prompt_tokens > one.usage!.prompt_tokens, 'earlier turns reach the prompt')
    const base = await client.chat.completions.create({ model: '', messages: turns, ...greedy })
    const poet = await client.chat.completions.create({ model: 'poet', messages: turns, ...greedy })
    t.equal(poet.model, 'poet')
    t.not(poet.choices[0]!.message.content, base.choices[0]!.message.content, 'the adapter changes the answer')
    const again = await client.chat.completions.create({ model: 'poet', messages: turns, ...greedy })
    t.equal(again.choices[0]!.message.content, poet.choices[0]!.message.content, 'greedy is deterministic')
  })

  t.test('n > 1 with a seed: n reproducible choices', async (t) => {
    const ask = () =>
      client.chat.completions.create({ model: 'poet', messages: user('Pick'), max_tokens: 10, n: 3, seed: 7 })
    const a = await ask()
    const b = await ask()
    t.same(
      a.choices.map((c) => c.index),
      [0, 1, 2],
    )
    t.same(
      a.choices.map((c) => c.message.content),
      b.choices.map((c) => c.message.content),
      'same seed, same choices',
    )
    t.ok(new Set(a.choices.map((c) => c.message.content)).size > 1, 'the choices differ from each other')
  })

  t.test('stop as a string and as an array: the text ends before the stop sequence', async (t) => {
    const free = await client.completions.create({
      model: '',
      prompt: 'Once upon a time',
      max_tokens: 16,
      temperature: 0,
    })
    const text = free.choices[0]!.text
    const stop = text.slice(4, 6)
    t.ok(stop.length === 2, `using ${JSON.stringify(stop)} from ${JSON.stringify(text)}`)
    const cut = text.slice(0, text.indexOf(stop))
    const asString = await client.completions.create({
      model: '',
      prompt: 'Once upon a time',
      max_tokens: 16,
      temperature: 0,
      stop,
    })
    t.equal(asString.choices[0]!.text, cut)
    t.equal(asString.choices[0]!.finish_reason, 'stop')
    const asArray = await client.completions.create({
      model: '',
      prompt: 'Once upon a time',
      max_tokens: 16,
      temperature: 0,
      stop: ['@@never@@', stop],
    })
    t.equal(asArray.choices[0]!.text, cut)
    const streamed = await client.completions.create({
      model: '',
      prompt: 'Once upon a time',
      max_tokens: 16,
      temperature: 0,
      stop: [stop],
      stream: true,
    })
    let joined = ''
    for await (const chunk of streamed) joined += chunk.choices[0]?.text ?? ''
    t.equal(joined, cut, 'streamed text holds back a possible stop prefix and never leaks the stop sequence')
  })

  t.test('completions: prompt arrays, n, echo, logprobs', async (t) => {
    const res = await client.completions.create({
      model: '',
      prompt: ['First prompt', 'Second prompt'],
      max_tokens: 5,
      n: 2,
      temperature: 0,
    })
    t.equal(res.object, 'text_completion')
    t.same(
      res.choices.map((c) => c.index),
      [0, 1, 2, 3],
    )
    t.equal(res.choices[0]!.text, res.choices[1]!.text, 'greedy choices of one prompt agree')
    const echo = await client.completions.create({
      model: '',
      prompt: 'Echo me',
      max_tokens: 4,
      temperature: 0,
      echo: true,
    })
    t.ok(echo.choices[0]!.text.startsWith('Echo me'))
    const lp = await client.completions.create({
      model: '',
      prompt: 'Log me',
      max_tokens: 4,
      temperature: 0,
      logprobs: 2,
    })
    const logprobs = lp.choices[0]!.logprobs!
    t.equal(logprobs.tokens!.length, 4)
    t.equal(logprobs.token_logprobs!.length, 4)
    t.ok(logprobs.token_logprobs!.every((v) => typeof v === 'number' && v <= 0))
    t.equal(Object.keys(logprobs.top_logprobs![0]!).length, 2)
  })

  t.test('/v1/models lists the base model and the adapters with their source', async (t) => {
    const models = []
    for await (const m of client.models.list()) models.push(m as unknown as { id: string; adapter_source?: string })
    t.equal(models[0]!.id, 'test-model')
    t.ok(models.some((m) => m.id === 'poet' && m.adapter_source === 'local'))
    t.ok(models.some((m) => m.id === 'private' && m.adapter_source === 'local'))
  })

  t.test('structured output: json_schema and json_object, inside a mixed batch', async (t) => {
    const schema = {
      type: 'object',
      properties: {
        name: { type: 'string', maxLength: 8 },
        age: { type: 'integer', minimum: 0, maximum: 120 },
        kind: { enum: ['cat', 'dog'] },
      },
      required: ['name', 'age', 'kind'],
      additionalProperties: false,
    }
    const [structured, plain, loose] = await Promise.all([
      client.chat.completions.create({
        model: 'poet',
        messages: user('Describe a pet'),
        max_tokens: 200,
        seed: 3,
        response_format: { type: 'json_schema', json_schema: { name: 'pet', schema, strict: true } },
      }),
      client.chat.completions.create({ model: '', messages: user('Describe a pet'), ...greedy }),
      client.chat.completions.create({
        model: '',
        messages: user('Any JSON'),
        max_tokens: 200,
        temperature: 0,
        response_format: { type: 'json_object' },
      }),
    ])
    const pet = JSON.parse(structured.choices[0]!.message.content!) as Record<string, unknown>
    t.same(Object.keys(pet).sort(), ['age', 'kind', 'name'])
    t.type(pet.name, 'string')
    t.ok(Number.isInteger(pet.age) && (pet.age as number) >= 0 && (pet.age as number) <= 120)
    t.ok(['cat', 'dog'].includes(pet.kind as string))
    t.equal(structured.choices[0]!.finish_reason, 'stop', 'the grammar ends the answer with eos')
    t.type(plain.choices[0]!.message.content, 'string')
    const object = JSON.parse(loose.choices[0]!.message.content!) as unknown
    t.ok(object !== null && typeof object === 'object' && !Array.isArray(object), 'json_object gives an object')
    const bad = await client.chat.completions
      .create({
        model: '',
        messages: user('x'),
        response_format: {
          type: 'json_schema',
          json_schema: { name: 'x', schema: { type: 'string', pattern: '(?<=a)b' } },
        },
      })
      .catch((e: unknown) => e)
    t.type(bad, OpenAI.UnprocessableEntityError, String(bad))
    t.match(String(bad), /response_format cannot be compiled: .*pattern/)
    const onCompletions = await client.completions
      .create({ model: '', prompt: 'x', response_format: { type: 'json_object' } } as never)
      .catch((e: unknown) => e)
    t.type(onCompletions, OpenAI.UnprocessableEntityError)
    t.match(String(onCompletions), /use that endpoint for JSON output/)
  })

  t.test('errors arrive as the SDK typed errors', async (t) => {
    const missing = await client.chat.completions
      .create({ model: 'no-such-adapter', messages: user('x') })
      .catch((e: unknown) => e)
    t.type(missing, OpenAI.NotFoundError, String(missing))
    const unauthorized = await client.chat.completions
      .create({ model: 'private', messages: user('x') })
      .catch((e: unknown) => e)
    t.type(unauthorized, OpenAI.AuthenticationError, String(unauthorized))
    const withToken = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'right-token', maxRetries: 0 })
    const ok = await withToken.chat.completions.create({ model: 'private', messages: user('x'), max_tokens: 2 })
    t.equal(ok.choices.length, 1, 'the Bearer api key is the adapter token')
    const viaBody = await client.chat.completions.create({
      model: 'private',
      messages: user('x'),
      max_tokens: 2,
      // @ts-expect-error Loom/LoRAX extension field
      api_token: 'right-token',
    })
    t.equal(viaBody.choices.length, 1, 'api_token in the body works too')
    const invalid = await client.chat.completions
      .create({ model: '', messages: user('x'), temperature: 5 })
      .catch((err: unknown) => err)
    t.type(invalid, OpenAI.UnprocessableEntityError)
    t.match(
      (invalid as InstanceType<typeof OpenAI.APIError>).message,
      /`temperature` must be a number >= 0 and <= 2; received 5/,
    )
    t.equal((invalid as { param?: string }).param, 'temperature')

    const idle = test.server.backend.stats()
    t.same([idle.runningRequests, idle.queuedRequests], [0, 0], 'nothing left running from earlier requests')
    // Fill the server (max_concurrent_requests 4) with long requests, then one more is refused.
    const long = Array.from({ length: 4 }, () =>
      client.completions.create({
        model: '',
        prompt: 'busy',
        max_tokens: 900,
        temperature: 0,
        ignore_eos_token: true,
      } as never),
    )
    // Wait until all four are inside the engine (on a loaded machine they arrive slowly).
    const busy = () => {
      const s = test.server.backend.stats()
      return s.runningRequests + s.queuedRequests
    }
    for (let waited = 0; busy() < 4 && waited < 10_000; waited += 10) {
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
    t.equal(busy(), 4, 'the four long requests fill the server')
    const refused = await client.completions
      .create({ model: '', prompt: 'one more', max_tokens: 2 })
      .catch((e: unknown) => e)
    t.type(refused, OpenAI.RateLimitError, String(refused))
    await Promise.all(long)
  })
})
