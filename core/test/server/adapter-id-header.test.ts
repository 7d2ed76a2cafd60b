import { join } from 'node:path'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

/**
 * Ids and credentials that HTTP headers cannot carry raw: an adapter directory named in another
 * script still answers (its id percent-encoded in `x-adapter-id`), and a malformed Bearer token is
 * ignored like an absent one, and never logged.
 */
t.test('headers carry any adapter id; a malformed Bearer token is ignored, never logged', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { hiddenSize: 64, numLayers: 2, seed: 4 })
  const adapters = join(dir, 'adapters')
  await buildLoraAdapter(join(adapters, '中文'), { model: config, rank: 4, seed: 2 })
  await buildLoraAdapter(join(adapters, 'a%41,b'), { model: config, rank: 4, seed: 3 })
  const test = await startTestServer(join(dir, 'server'), modelDir, { adapterRoot: adapters })
  t.teardown(() => test.close())

  for (const url of ['/generate', '/generate_stream']) {
    const res = await test.server.app.inject({
      method: 'POST',
      url,
      payload: { inputs: 'hello', parameters: { max_new_tokens: 2, adapter_id: '中文' } },
    })
    t.equal(res.statusCode, 200, `${url}: 200`)
    t.equal(res.headers['x-adapter-id'], encodeURIComponent('中文'), `${url}: the id, percent-encoded`)
    t.equal(res.headers['x-adapter-source'], 'local')
  }
  const odd = await test.server.app.inject({
    method: 'POST',
    url: '/generate',
    payload: { inputs: 'hello', parameters: { max_new_tokens: 2, adapter_id: 'a%41,b' } },
  })
  t.equal(odd.headers['x-adapter-id'], 'a%2541%2Cb', '% and , are encoded: one id, decoding to itself')
  t.equal(decodeURIComponent(String(odd.headers['x-adapter-id'])), 'a%41,b')

  for (const header of ['Bearer QA-SECRET-é', 'Bearer QA-SECRET WITH SPACE']) {
    const res = await test.server.app.inject({
      method: 'POST',
      url: '/generate',
      headers: { authorization: header },
      payload: { inputs: 'hello', parameters: { max_new_tokens: 2 } },
    })
    t.equal(res.statusCode, 200, 'a malformed Bearer value is ignored: the base model needs no token')
  }
  t.notOk(
    test.logs.some((l) => l.includes('QA-SECRET')),
    'nor logged',
  )
})
