import { join } from 'node:path'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

t.test('adapters listed under adapters.preload are loaded before the server is ready', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { seed: 1 })
  await buildLoraAdapter(join(modelDir, 'adapters', 'warm'), { model: config, seed: 2 })
  const test = await startTestServer(join(dir, 'server'), modelDir, {
    adapterRoot: join(modelDir, 'adapters'),
    preload: [{ id: 'warm' }],
  })
  t.teardown(() => test.close())
  t.equal(test.server.backend.stats().loadedAdapters, 1, 'loaded at startup')
  t.match(test.logs.join(''), /"preloaded adapter"/)
  // testkit adapters name `testkit/tiny-model` as their base; the server serves `test-model`.
  t.match(test.logs.join(''), /"adapterBase":"testkit\/tiny-model".*another base model name/)
})

t.test('a preload that cannot be loaded stops startup naming the entry and the reason', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  await buildModel(modelDir, { seed: 1 })
  await t.rejects(
    startTestServer(join(dir, 'server'), modelDir, { adapterRoot: modelDir, preload: [{ id: 'missing' }] }),
    {
      code: 'config_invalid',
      message:
        /loom\.yaml: `adapters\.preload\[0\]` cannot be preloaded with the server's own credentials \(Adapter `missing` was not found in source `local`\); found \{"source":"local","id":"missing"\}$/,
    },
  )
})

t.test('a model.path that does not exist is named as such at startup', async (t) => {
  const dir = t.testdir()
  await t.rejects(startTestServer(join(dir, 'server'), join(dir, 'no-such-model')), {
    code: 'model_invalid',
    message: /the directory does not exist \(check `model\.path` in .*loom\.yaml\)/,
  })
})
