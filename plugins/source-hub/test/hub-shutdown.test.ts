import { join } from 'node:path'
import t from 'tap'
import { FakeHub, buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from '../../../core/test/server/test-server.ts'

/**
 * Shutdown does not wait on a slow source: a request stuck on the hub answers `server_closing`
 * at once (no retries, no "download failed") and the server finishes closing.
 */
t.test('closing the server stops requests waiting on a slow hub', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { seed: 3 })
  await buildLoraAdapter(join(dir, 'adapters', 'acme', 'poet'), { model: config, rank: 4, seed: 9 })
  const hub = await FakeHub.start()
  t.teardown(() => hub.close())
  await hub.addRepo('acme/poet', join(dir, 'adapters', 'acme', 'poet'))
  const test = await startTestServer(join(dir, 'server'), modelDir, {
    plugins: [{ use: '@loom/source-hub', options: { hub_url: hub.url, retries: 3 } }],
  })
  let closed = false
  t.teardown(() => (closed ? undefined : test.close()))

  hub.setDelay(60_000)
  const answer = test.server.app.inject({
    method: 'POST',
    url: '/generate',
    payload: { inputs: 'hello', parameters: { max_new_tokens: 2, adapter_id: 'acme/poet', adapter_source: 'hub' } },
  })
  await new Promise((resolve) => setTimeout(resolve, 300))
  const started = performance.now()
  await test.close()
  closed = true
  const res = await answer
  t.ok(performance.now() - started < 10_000, 'closed without waiting for the hub')
  t.equal(res.statusCode, 503)
  t.same(res.json(), { error: 'The server is shutting down', error_type: 'unhealthy' })
  t.notMatch(test.logs.join(''), /retrying/, 'nothing was retried')
})
