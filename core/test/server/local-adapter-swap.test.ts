import { copyFile, readdir, stat, utimes } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

/**
 * A local adapter is used in place: replacing its files is seen by the very next request, even
 * when the new files have the same names, sizes and modification times (`cp -p`, `touch -r`).
 */
t.test('a local adapter replaced in place is served with its new weights at once', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { hiddenSize: 64, numLayers: 2, seed: 8 })
  const root = join(dir, 'adapters')
  // Same shape and rank: the files have the same sizes.
  await buildLoraAdapter(join(root, 'swap'), { model: config, rank: 4, seed: 1, initScale: 0.5 })
  await buildLoraAdapter(join(root, 'other'), { model: config, rank: 4, seed: 2, initScale: 0.5 })
  const test = await startTestServer(join(dir, 'server'), modelDir, { adapterRoot: root })
  t.teardown(() => test.close())
  const generate = async (adapter: string) => {
    const res = await test.server.app.inject({
      method: 'POST',
      url: '/generate',
      payload: {
        inputs: 'hello there',
        parameters: { max_new_tokens: 8, adapter_id: adapter, ignore_eos_token: true },
      },
    })
    t.equal(res.statusCode, 200, res.body)
    return (res.json() as { generated_text: string }).generated_text
  }
  const before = await generate('swap')
  const other = await generate('other')
  t.not(before, other, 'the two adapters differ')

  for (const name of await readdir(join(root, 'other'))) {
    const target = join(root, 'swap', name)
    const old = await stat(target)
    await copyFile(join(root, 'other', name), target)
    await utimes(target, old.atime, old.mtime)
    t.equal((await stat(target)).size, old.size, `${name}: same size`)
  }
  t.equal(await generate('swap'), other, 'the next request uses the new files')
})
