import t from 'tap'
import { startSdkServer } from './sdk-test-server.ts'

/**
 * QA: the `developer` role (OpenAI's replacement for `system`) reaches the chat template as
 * `system`, so templates that know only the classic roles (the testkit's raises on any other)
 * render it, and the answer equals the one for the same text sent as `system`.
 */
t.test('a developer message is templated as a system message', async (t) => {
  const { test, client } = await startSdkServer(t.testdir())
  t.teardown(() => test.close())
  const ask = (role: 'developer' | 'system') =>
    client.chat.completions.create({
      model: '',
      messages: [
        { role, content: 'Be Hamlet' },
        { role: 'user', content: 'x' },
      ],
      max_tokens: 6,
      temperature: 0,
    })
  const developer = await ask('developer')
  const system = await ask('system')
  t.equal(developer.usage!.prompt_tokens, system.usage!.prompt_tokens, 'the same prompt is rendered')
  t.equal(developer.choices[0]!.message.content, system.choices[0]!.message.content, 'so the same answer comes back')
})
