import { join } from 'node:path'
import type OpenAI from 'openai'
import t from 'tap'
import { buildLoraAdapter } from '@loom/testkit'
import { startSdkServer } from './sdk-test-server.ts'

/**
 * QA: responses name a concrete model as OpenAI's do. `model: ""` (the base model) is answered
 * with the served id, in every streamed chunk too; an adapter is reported as the client named it.
 */
t.test('responses report the served model id for the base model', async (t) => {
  const { test, client } = await startSdkServer(t.testdir(), {
    prepare: (modelDir, config) => buildLoraAdapter(join(modelDir, 'poet'), { model: config, seed: 5 }),
  })
  t.teardown(() => test.close())
  const ask = { max_tokens: 3, temperature: 0 } as const
  const messages = [{ role: 'user' as const, content: 'Hi' }]
  for (const [sent, reported] of [
    ['', 'test-model'],
    ['test-model', 'test-model'],
    ['poet', 'poet'],
  ] as const) {
    const chat = await client.chat.completions.create({ model: sent, messages, ...ask })
    t.equal(chat.model, reported, `chat, model ${JSON.stringify(sent)}`)
    const text = await client.completions.create({ model: sent, prompt: 'Hi', ...ask })
    t.equal(text.model, reported, `completions, model ${JSON.stringify(sent)}`)

    const chatChunks: OpenAI.ChatCompletionChunk[] = []
    const chatStream = await client.chat.completions.create({
      model: sent,
      messages,
      ...ask,
      stream: true,
      stream_options: { include_usage: true },
    })
    for await (const chunk of chatStream) chatChunks.push(chunk)
    t.same([...new Set(chatChunks.map((c) => c.model))], [reported], `chat stream, model ${JSON.stringify(sent)}`)
    const textModels = new Set<string>()
    for await (const chunk of await client.completions.create({ model: sent, prompt: 'Hi', ...ask, stream: true }))
      textModels.add(chunk.model)
    t.same([...textModels], [reported], `completions stream, model ${JSON.stringify(sent)}`)
  }
})
