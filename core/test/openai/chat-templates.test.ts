import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from '../server/test-server.ts'

const chat = (model: string, content = 'Hello') => ({
  method: 'POST' as const,
  url: '/v1/chat/completions',
  payload: { model, messages: [{ role: 'user', content }], max_tokens: 2, temperature: 0 },
})

/**
 * Acceptance (issue 5): an adapter with its own chat template uses it (visible in the prompt
 * tokens), one without uses the base model's, and with neither the documented error comes back.
 */
t.test('chat templates: the adapter’s own, else the base model’s, else a 422', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { seed: 2 })
  const adapters = join(modelDir, 'adapters')
  await buildLoraAdapter(join(adapters, 'plain'), { model: config, seed: 3 })
  await buildLoraAdapter(join(adapters, 'templated'), { model: config, seed: 4 })
  // A template that repeats a long preamble: its prompts are visibly longer.
  const preamble = 'You are the templated adapter. '.repeat(8)
  await writeFile(
    join(adapters, 'templated', 'tokenizer_config.json'),
    JSON.stringify({
      chat_template: `{{ bos_token }}${preamble}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}`,
    }),
  )
  await buildLoraAdapter(join(adapters, 'strict'), { model: config, seed: 5 })
  await writeFile(
    join(adapters, 'strict', 'tokenizer_config.json'),
    JSON.stringify({
      chat_template:
        "{% if messages[0].role != 'system' %}{{ raise_exception('the first message must be a system message') }}{% endif %}{{ messages[0].content }}",
    }),
  )
  const test = await startTestServer(join(dir, 'server'), modelDir, { adapterRoot: adapters })
  t.teardown(() => test.close())
  const promptTokens = async (model: string) => {
    const res = await test.server.app.inject(chat(model))
    t.equal(res.statusCode, 200, `${model}: ${res.statusCode}`)
    return (res.json() as { usage: { prompt_tokens: number } }).usage.prompt_tokens
  }
  const base = await promptTokens('')
  t.equal(await promptTokens('plain'), base, 'an adapter without a template uses the base template')
  const own = await promptTokens('templated')
  t.ok(own > base + 40, `the adapter's template is used (${own} prompt tokens vs ${base})`)

  const raised = await test.server.app.inject(chat('strict'))
  t.equal(raised.statusCode, 422)
  t.same(raised.json(), {
    error: {
      message:
        'Failed applying chat template to inputs: the adapter chat_template: the first message must be a system message',
      type: 'invalid_request_error',
      param: null,
      code: 'template_error',
    },
  })

  // A base model without any chat template.
  const bare = join(dir, 'bare')
  const bareConfig = await buildModel(bare, { seed: 2, tokenizer: { chatTemplate: null } })
  await buildLoraAdapter(join(bare, 'adapters', 'plain'), { model: bareConfig, seed: 3 })
  const bareServer = await startTestServer(join(dir, 'bare-server'), bare, { adapterRoot: join(bare, 'adapters') })
  t.teardown(() => bareServer.close())
  for (const model of ['', 'plain']) {
    const res = await bareServer.server.app.inject(chat(model))
    t.equal(res.statusCode, 422)
    t.same(res.json(), {
      error: {
        message: `No chat template for \`${model || 'test-model'}\`; use /v1/completions with a plain prompt`,
        type: 'invalid_request_error',
        param: null,
        code: 'template_missing',
      },
    })
  }
  const completions = await bareServer.server.app.inject({
    method: 'POST',
    url: '/v1/completions',
    payload: { model: '', prompt: 'Hello', max_tokens: 2 },
  })
  t.equal(completions.statusCode, 200, '/v1/completions needs no template')
})
