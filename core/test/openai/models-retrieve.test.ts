import { join } from 'node:path'
import OpenAI from 'openai'
import t from 'tap'
import { buildLoraAdapter } from '@loom/testkit'
import { startSdkServer } from './sdk-test-server.ts'

/**
 * QA: `GET /v1/models/{id}` (`client.models.retrieve`) answers for the base model and every adapter
 * `/v1/models` lists, ids with slashes included, and an unknown id is a 404 in OpenAI's shape
 * naming it.
 */
t.test('models.retrieve', async (t) => {
  const { test, client, baseUrl } = await startSdkServer(t.testdir(), {
    prepare: async (modelDir, config) => {
      await buildLoraAdapter(join(modelDir, 'poet'), { model: config, seed: 5 })
      await buildLoraAdapter(join(modelDir, 'org', 'bard'), { model: config, seed: 6 })
    },
    server: { preload: [{ id: 'poet' }, { id: 'org/bard' }] },
  })
  t.teardown(() => test.close())
  const listed = []
  for await (const model of client.models.list()) listed.push(model)
  t.same(
    listed.map((m) => m.id),
    ['test-model', 'poet', 'org/bard'],
  )
  for (const model of listed) {
    t.same(await client.models.retrieve(model.id), model, `${model.id}: the entry /v1/models lists`)
  }
  const raw = await fetch(`${baseUrl}/v1/models/org/bard`)
  t.equal(raw.status, 200, 'an unencoded slash works too')
  t.equal(((await raw.json()) as { id: string }).id, 'org/bard')

  for (const id of ['nope', 'org/nope', 'a b']) {
    const err = (await client.models.retrieve(id).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>
    t.type(err, OpenAI.NotFoundError, String(err))
    t.same(err.error, {
      message: `The model \`${id}\` does not exist on this server; GET /v1/models lists the base model and the adapters it knows`,
      type: 'not_found_error',
      param: 'model',
      code: 'model_not_found',
    })
  }
})
