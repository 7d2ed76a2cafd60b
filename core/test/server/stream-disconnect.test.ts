import { request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

/** Acceptance (issue 3): a stream whose client disconnects frees its KV blocks at once. */
t.test('a disconnected stream frees its KV blocks', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  await buildModel(modelDir, { hiddenSize: 64, numLayers: 2, seed: 5, maxPositionEmbeddings: 1024 })
  const test = await startTestServer(join(dir, 'server'), modelDir, { limits: { max_total_tokens: 1024 } })
  t.teardown(() => test.close())
  await test.server.listen({ host: '127.0.0.1', port: 0 })
  const { port } = test.server.app.server.address() as AddressInfo
  const stats = () => test.server.backend.stats()
  const total = stats().kvBlocksTotal
  t.equal(stats().kvBlocksFree, total, 'all blocks free before the request')

  // Read a few events to learn how fast tokens come, then hang up.
  const events = 6
  const started = new Promise<{ disconnect: () => void; msPerToken: number }>((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/generate_stream',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        let seen = 0
        let first = 0
        res.on('data', (chunk: Buffer) => {
          if (seen === 0) {
            t.match(chunk.toString(), /^data: {"token"/, 'the stream started')
            first = performance.now()
          }
          seen += chunk.toString().split('data: ').length - 1
          if (seen >= events) {
            res.removeAllListeners('data')
            resolve({ disconnect: () => req.destroy(), msPerToken: (performance.now() - first) / (seen - 1) })
          }
        })
        res.on('error', () => undefined)
      },
    )
    req.on('error', (err) => {
      if (!req.destroyed) reject(err)
    })
    // A long prompt and a long generation: the request holds several blocks for a while.
    req.end(
      JSON.stringify({ inputs: 'word '.repeat(100), parameters: { max_new_tokens: 700, ignore_eos_token: true } }),
    )
  })
  const { disconnect, msPerToken } = await started
  t.ok(stats().kvBlocksFree < total, `blocks are in use while streaming (${stats().kvBlocksFree}/${total} free)`)
  t.equal(stats().runningRequests, 1)
  const hungUp = performance.now()
  disconnect()

  // Finishing the 700 tokens would take ~msPerToken each; freeing must come long before that.
  const naturalEndMs = (700 - events) * msPerToken
  const deadline = Date.now() + 5000
  while (stats().kvBlocksFree !== total && Date.now() < deadline) await sleep(10)
  t.equal(stats().kvBlocksFree, total, 'every block is free again after the disconnect')
  const freedAfterMs = performance.now() - hungUp
  t.ok(
    freedAfterMs < naturalEndMs / 2,
    `freed ${freedAfterMs.toFixed(1)} ms after the disconnect; generation would have run ~${naturalEndMs.toFixed(0)} ms more`,
  )
  t.equal(stats().runningRequests, 0, 'the request left the batch')
  const metrics = await test.server.app.inject({ method: 'GET', url: '/metrics' })
  t.match(metrics.body, new RegExp(`loom_kv_blocks_free ${total}\\b`), '/metrics reports the freed blocks')
  // A client hanging up is not a server failure: counted apart, logged below error level.
  const deadline2 = Date.now() + 2000
  while (!test.logs.some((l) => l.includes('cancelled by the client')) && Date.now() < deadline2) await sleep(10)
  const after = await test.server.app.inject({ method: 'GET', url: '/metrics' })
  t.match(after.body, /^loom_request_cancelled 1$/m, 'counted in loom_request_cancelled')
  t.notMatch(after.body, /^loom_request_failure\{/m, 'not counted as a failure')
  const lines = test.logs.flatMap((chunk) => chunk.split('\n')).filter((l) => l.includes('cancelled by the client'))
  t.equal(lines.length, 1, 'logged once')
  t.match(JSON.parse(lines[0]!), { level: 30 }, 'at info level, without a stack trace')
  t.notMatch(lines[0]!, /"stack"/)
})
