import OpenAI from 'openai'
import t from 'tap'
import { startSdkServer } from './sdk-test-server.ts'

/**
 * QA: without `max_tokens`, `/v1/completions` stops after 16 tokens (OpenAI's documented default
 * for that endpoint), streaming or not, while chat still generates up to the context limit.
 */
t.test('default completion lengths follow OpenAI', async (t) => {
  const { test, client } = await startSdkServer(t.testdir(), { server: { limits: { max_total_tokens: 64 } } })
  t.teardown(() => test.close())
  // ignore_eos_token (a Loom extension) keeps the model from ending early, so only the length limit stops it.
  const endless = { model: '', temperature: 0, ignore_eos_token: true } as const

  const text = await client.completions.create({ ...endless, prompt: 'Once' } as never)
  t.equal((text as OpenAI.Completion).usage!.completion_tokens, 16)
  t.equal((text as OpenAI.Completion).choices[0]!.finish_reason, 'length')

  const stream = await client.completions.create({
    ...endless,
    prompt: 'Once',
    stream: true,
    stream_options: { include_usage: true },
  } as never)
  let usage: OpenAI.CompletionUsage | null | undefined
  for await (const chunk of stream as unknown as AsyncIterable<OpenAI.Completion>) usage = chunk.usage ?? usage
  t.equal(usage?.completion_tokens, 16, 'streaming too')

  const explicit = await client.completions.create({ ...endless, prompt: 'Once', max_tokens: 20 } as never)
  t.equal((explicit as OpenAI.Completion).usage!.completion_tokens, 20, 'max_tokens still wins')

  const chat = await client.chat.completions.create({
    ...endless,
    messages: [{ role: 'user', content: 'Once' }],
  } as never)
  const chatUsage = (chat as OpenAI.ChatCompletion).usage!
  t.equal(chatUsage.total_tokens, 64, 'chat fills the context')

  // A prompt that leaves fewer than 16 tokens: the error says the 16 is the default, not a sent value.
  const crowded = await client.completions
    .create({ model: '', prompt: 'the '.repeat(55) })
    .catch((err: unknown) => err as InstanceType<typeof OpenAI.APIError>)
  t.type(crowded, OpenAI.UnprocessableEntityError)
  t.equal((crowded as InstanceType<typeof OpenAI.APIError>).param, 'max_tokens')
  t.match(
    (crowded as InstanceType<typeof OpenAI.APIError>).message,
    /`max_tokens` plus the \d+ prompt tokens must be <= 64 \(not sent, so its default 16 applies; send a smaller `max_tokens` or a shorter prompt\); received 16$/,
  )
})
