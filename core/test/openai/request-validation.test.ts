import OpenAI from 'openai'
import t, { type Test } from 'tap'
import { startSdkServer } from './sdk-test-server.ts'

type ApiError = InstanceType<typeof OpenAI.APIError>

/**
 * QA: v1 validation is consistent. `null` means "not set" for every optional field (the SDKs send
 * it), the fields Loom ignores are still type-checked as OpenAI types them, and a json_schema name
 * follows OpenAI's pattern. Every refusal is a 422 in OpenAI's shape naming the field.
 */
t.test('v1 request validation', async (t) => {
  const { test, client } = await startSdkServer(t.testdir())
  t.teardown(() => test.close())
  const messages = [{ role: 'user' as const, content: 'x' }]
  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => null,
      (err: unknown) => err as ApiError,
    )
  const expectRefusal = async (t: Test, promise: Promise<unknown>, param: string, message: RegExp) => {
    const err = await refusal(promise)
    t.type(err, OpenAI.UnprocessableEntityError, String(err))
    t.equal(err?.param, param)
    t.equal(err?.code, 'validation_error')
    t.equal(err?.type, 'invalid_request_error')
    t.match(err?.message, message)
  }

  t.test('null is the same as absent', async (t) => {
    const chat = await client.chat.completions.create({
      model: '',
      messages,
      max_tokens: 2,
      max_completion_tokens: null,
      tools: null,
      tool_choice: null,
      functions: null,
      function_call: null,
      parallel_tool_calls: null,
      response_format: null,
      stream_options: null,
      logit_bias: null,
      user: null,
      metadata: null,
      store: null,
      service_tier: null,
      temperature: null,
      seed: null,
      stop: null,
    } as never)
    t.equal((chat as OpenAI.ChatCompletion).usage!.completion_tokens, 2, 'max_tokens applies, not the null field')
    const text = await client.completions.create({
      model: '',
      prompt: 'x',
      max_tokens: 2,
      suffix: null,
      echo: null,
      logprobs: null,
      best_of: null,
      user: null,
    } as never)
    t.equal((text as OpenAI.Completion).usage!.completion_tokens, 2)
    // A previous answer sent back as-is carries `refusal: null` (and `tool_calls: null` from some clients).
    const replayed = { ...(chat as OpenAI.ChatCompletion).choices[0]!.message, tool_calls: null }
    const next = await client.chat.completions.create({
      model: '',
      messages: [...messages, replayed, { role: 'user', content: 'y' }],
      max_tokens: 2,
    } as never)
    t.equal((next as OpenAI.ChatCompletion).choices.length, 1)
  })

  t.test('unsupported and unknown fields with a value are still refused', async (t) => {
    const tools = [{ type: 'function' as const, function: { name: 'f' } }]
    await expectRefusal(
      t,
      client.chat.completions.create({ model: '', messages, tools }),
      'tools',
      /`tools` is not supported by this server; received \[/,
    )
    await expectRefusal(
      t,
      client.chat.completions.create({ model: '', messages, max_new_token: 3 } as never),
      'max_new_token',
      /`max_new_token` is not a known field; received 3/,
    )
  })

  t.test('ignored fields are type-checked', async (t) => {
    const chat = (extra: object) => client.chat.completions.create({ model: '', messages, ...extra } as never)
    await expectRefusal(t, chat({ user: 5 }), 'user', /`user` must be a string; received 5/)
    await expectRefusal(
      t,
      client.completions.create({ model: '', prompt: 'x', user: 5 } as never),
      'user',
      /`user` must be a string; received 5/,
    )
    await expectRefusal(
      t,
      chat({ metadata: 'x' }),
      'metadata',
      /`metadata` must be an object of at most 16 string values; received "x"/,
    )
    await expectRefusal(
      t,
      chat({ metadata: { run: 7 } }),
      'metadata.run',
      /`metadata.run` must be a string of at most 512 characters; received 7/,
    )
    const many = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']))
    await expectRefusal(t, chat({ metadata: many }), 'metadata', /received "17 keys"/)
    await expectRefusal(t, chat({ store: 'yes' }), 'store', /`store` must be true or false; received "yes"/)
    const ok = await client.chat.completions.create({
      model: '',
      messages,
      max_tokens: 1,
      user: 'user-1',
      metadata: { run: '7' },
      store: false,
    })
    t.equal(ok.choices.length, 1, 'well-typed values pass')
  })

  t.test('json_schema.name follows OpenAI: ^[a-zA-Z0-9_-]{1,64}$', async (t) => {
    const withName = (name: string) =>
      client.chat.completions.create({
        model: '',
        messages,
        max_tokens: 1,
        response_format: { type: 'json_schema', json_schema: { name, schema: { type: 'object' } } },
      })
    for (const name of ['bad name!', '', 'x'.repeat(65), 'naïve']) {
      await expectRefusal(
        t,
        withName(name),
        'response_format.json_schema.name',
        /`response_format.json_schema.name` must be 1 to 64 characters from a-z, A-Z, 0-9, "_" and "-"; received/,
      )
    }
    const ok = await withName(`Pet_record-${'x'.repeat(53)}`)
    t.equal(ok.choices.length, 1, 'a 64-character name of allowed characters passes')
  })

  t.test('a malformed api_token is refused without its value; model ids are bounded', async (t) => {
    const secret = 'pbQA-SECRET-eeee5555'
    const err = await refusal(
      client.completions.create({ model: '', prompt: 'x', max_tokens: 1, api_token: [secret] } as never),
    )
    t.type(err, OpenAI.UnprocessableEntityError)
    t.equal(err?.param, 'api_token')
    t.match(err?.message, /must be a string; received an array \(value not shown\)/)
    t.notMatch(err?.message, secret)
    await expectRefusal(
      t,
      client.chat.completions.create({ model: `kjv/\r\nX: 1`, messages, max_tokens: 1 }),
      'model',
      /must not contain control or invisible formatting characters/,
    )
    await expectRefusal(
      t,
      client.chat.completions.create({ model: 'a'.repeat(1025), messages, max_tokens: 1 }),
      'model',
      /must be at most 1024 characters long/,
    )
  })

  t.test('a request that can never be admitted is a 422 naming n or prompt, not a retryable 429', async (t) => {
    const many = await refusal(
      client.completions.create({ model: '', prompt: Array(9).fill('A'), n: 16, max_tokens: 2 }),
    )
    t.type(many, OpenAI.UnprocessableEntityError)
    t.equal(many?.param, 'n')
    t.match(many?.message, /`n` times the 9 prompts must be <= 128 \(max_concurrent_requests/)
    const prompts = await refusal(client.completions.create({ model: '', prompt: Array(200).fill('A'), max_tokens: 2 }))
    t.equal(prompts?.param, 'prompt')
    t.match(prompts?.message, /must hold at most 128 .* prompts; received 200$/)
    await expectRefusal(
      t,
      client.completions.create({
        model: '',
        prompt: 'A',
        max_tokens: 2,
        response_format: { type: 'json_object' },
      } as never),
      'response_format',
      /`response_format` is supported on \/v1\/chat\/completions only/,
    )
    const bestOf = await refusal(client.completions.create({ model: '', prompt: 'A', best_of: 2, max_tokens: 2 }))
    t.match(bestOf?.message, /`best_of` is not supported by this server \(only 1, the default\); received 2/)
  })
})
