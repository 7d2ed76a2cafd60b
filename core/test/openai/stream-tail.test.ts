import type OpenAI from 'openai'
import t from 'tap'
import { startSdkServer } from './sdk-test-server.ts'

/**
 * A stream carries the whole output: text held back while it might still become a stop sequence
 * (or an unfinished character) when generation ends by length arrives before the finish chunk, so
 * the streamed text equals the non-streamed text (it used to be dropped).
 */
t.test('streams end with the text held back at the end', async (t) => {
  const { test, client } = await startSdkServer(t.testdir())
  t.teardown(() => test.close())
  const greedy = { model: '', temperature: 0, max_tokens: 4 } as const
  const messages = [{ role: 'user' as const, content: 'Tell me' }]

  const free = (await client.completions.create({ ...greedy, prompt: 'Once upon' })).choices[0]!.text
  // A stop sequence that the output's last character starts: that character is held back to the end.
  const completionStop = `${free.slice(-1)}\u0007never`
  const whole = await client.completions.create({ ...greedy, prompt: 'Once upon', stop: completionStop, n: 2 })
  t.equal(whole.choices[0]!.text, free, 'not a stop: the held-back character is part of the text')
  const joined = ['', '']
  for await (const chunk of await client.completions.create({
    ...greedy,
    prompt: 'Once upon',
    stop: completionStop,
    n: 2,
    stream: true,
  })) {
    for (const choice of chunk.choices) joined[choice.index] += choice.text
  }
  t.same(joined, [free, free], 'completions: every choice streams its whole text')

  const chatFree = (await client.chat.completions.create({ ...greedy, messages })).choices[0]!.message.content!
  const chatStop = `${chatFree.slice(-1)}\u0007never`
  const chunks: OpenAI.ChatCompletionChunk[] = []
  for await (const chunk of await client.chat.completions.create({ ...greedy, messages, stop: chatStop, stream: true }))
    chunks.push(chunk)
  t.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), chatFree, 'chat streams its whole text')
  const last = chunks[chunks.length - 1]!.choices[0]!
  t.same(last.delta, {}, 'the finish chunk stays empty')
  t.equal(last.finish_reason, 'length')
})
