import OpenAI from 'openai'
import t, { type Test } from 'tap'
import { startSdkServer } from './sdk-test-server.ts'

type ApiError = InstanceType<typeof OpenAI.APIError>

/** Field names a v1 client never sent: an error naming them sends the client looking for nothing. */
const NATIVE_NAMES = /max_new_tokens|inputs|truncate/

/**
 * QA: length errors found once the prompt is tokenized (prompt too long, prompt + max_tokens over
 * the context) name the v1 fields the client sent: `max_tokens` or `max_completion_tokens`,
 * `prompt` (`prompt[i]` in a list) or `messages`, in OpenAI's error shape.
 */
t.test('v1 length errors name the fields the client sent', async (t) => {
  const { test, client } = await startSdkServer(t.testdir(), { server: { limits: { max_total_tokens: 128 } } })
  t.teardown(() => test.close())
  const prompt = 'the '.repeat(60)
  const long = 'the '.repeat(200)
  const refused = async (t: Test, promise: Promise<unknown>, param: string, message: RegExp) => {
    const err = (await promise.then(
      () => null,
      (e: unknown) => e,
    )) as ApiError | null
    t.type(err, OpenAI.UnprocessableEntityError, String(err))
    t.equal(err?.param, param)
    t.equal(err?.code, 'validation_error')
    t.match(err?.message, message)
    t.notMatch(err?.message, NATIVE_NAMES, 'no native field names')
  }
  const completionPrompt = (await client.completions.create({ model: '', prompt, max_tokens: 1 })).usage!.prompt_tokens
  const chatPrompt = (
    await client.chat.completions.create({ model: '', messages: [{ role: 'user', content: prompt }], max_tokens: 1 })
  ).usage!.prompt_tokens
  const overCompletion = 128 - completionPrompt + 1
  const overChat = 128 - chatPrompt + 1

  t.test('/v1/completions', async (t) => {
    await refused(
      t,
      client.completions.create({ model: '', prompt, max_tokens: overCompletion }),
      'max_tokens',
      new RegExp(
        `^422 Input validation error: \`max_tokens\` plus the ${completionPrompt} prompt tokens must be <= 128; received ${overCompletion}$`,
      ),
    )
    await refused(
      t,
      client.completions.create({ model: '', prompt: long, max_tokens: 1 }),
      'prompt',
      /^422 Input validation error: `prompt` must be at most 127 tokens long; received \d+$/,
    )
    await refused(
      t,
      client.completions.create({ model: '', prompt: ['short', long], max_tokens: 1, n: 2 }),
      'prompt[1]',
      /`prompt\[1\]` must be at most 127 tokens long/,
    )
  })

  t.test('/v1/chat/completions', async (t) => {
    const messages = [{ role: 'user' as const, content: prompt }]
    await refused(
      t,
      client.chat.completions.create({ model: '', messages, max_tokens: overChat }),
      'max_tokens',
      new RegExp(`\`max_tokens\` plus the ${chatPrompt} prompt tokens must be <= 128; received ${overChat}$`),
    )
    await refused(
      t,
      client.chat.completions.create({ model: '', messages, max_completion_tokens: overChat }),
      'max_completion_tokens',
      new RegExp(`\`max_completion_tokens\` plus the ${chatPrompt} prompt tokens must be <= 128`),
    )
    await refused(
      t,
      client.chat.completions.create({ model: '', messages: [{ role: 'user', content: long }] }),
      'messages',
      /^422 Input validation error: `messages` must be at most 127 tokens long once the chat template is applied; received \d+$/,
    )
    const streamed = client.chat.completions.create({ model: '', messages, max_tokens: overChat, stream: true })
    await refused(t, streamed, 'max_tokens', /`max_tokens` plus/)
  })
})
