import { join } from 'node:path'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

/** Handles and timers the process holds, by kind (TTY and pipe handles belong to the test runner). */
function resources(): Map<string, number> {
  const counts = new Map<string, number>()
  for (const kind of process.getActiveResourcesInfo()) counts.set(kind, (counts.get(kind) ?? 0) + 1)
  return counts
}

/**
 * STYLE 3: everything a server creates is released on close — sockets, timers, worker threads of
 * the native runtime, plugin resources. Compare the process's active resources before and after a
 * server that served requests (with an adapter, a stream and structured output).
 */
t.test('a closed server leaves no handles or timers behind', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { seed: 4 })
  await buildLoraAdapter(join(modelDir, 'adapters', 'a'), { model: config, seed: 1 })
  const before = resources()
  const test = await startTestServer(join(dir, 'server'), modelDir, { adapterRoot: join(modelDir, 'adapters') })
  await test.server.listen({ host: '127.0.0.1', port: 0 })
  const app = test.server.app
  const ok = (status: number) => t.equal(status, 200)
  ok(
    (
      await app.inject({
        method: 'POST',
        url: '/generate',
        payload: { inputs: 'hi', parameters: { adapter_id: 'a', max_new_tokens: 4 } },
      })
    ).statusCode,
  )
  ok(
    (
      await app.inject({
        method: 'POST',
        url: '/generate_stream',
        payload: { inputs: 'hi', parameters: { max_new_tokens: 4 } },
      })
    ).statusCode,
  )
  ok(
    (
      await app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        payload: {
          model: '',
          messages: [{ role: 'user', content: 'x' }],
          max_tokens: 30,
          response_format: { type: 'json_object' },
        },
      })
    ).statusCode,
  )
  ok((await app.inject({ method: 'GET', url: '/metrics' })).statusCode)
  await test.close()
  // Let callbacks already queued by close (immediates) run before counting.
  await new Promise((resolve) => setTimeout(resolve, 50))
  const after = resources()
  for (const [kind, count] of after) {
    t.ok(count <= (before.get(kind) ?? 0), `${kind}: ${before.get(kind) ?? 0} before, ${count} after close`)
  }
})
