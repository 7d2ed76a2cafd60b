import { readFile, stat } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join, relative } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

const exampleDir = fileURLToPath(new URL('../../../examples/source-http-files', import.meta.url))

/** Issue 18, point 5: long work shows progress. */

const lines = (logs: string[]) =>
  logs
    .flatMap((chunk) => chunk.split('\n'))
    .flatMap((l) => (l.trim() ? [JSON.parse(l) as Record<string, unknown>] : []))

t.test('loading the model logs its phases with their times', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  await buildModel(modelDir, { hiddenSize: 32, numLayers: 1, seed: 2 })
  const test = await startTestServer(join(dir, 'server'), modelDir)
  t.teardown(() => test.close())
  const log = lines(test.logs)
  t.ok(
    log.some((l) => l.phase === 'weights' && l.msg === 'loading the model weights'),
    'the phase is announced as it starts',
  )
  const done = log.find((l) => l.phase === 'weights' && typeof l.seconds === 'number')
  t.match(done, { msg: /^loading the model weights: done in [\d.]+ s$/ }, 'and its time logged as it ends')
  const ready = log.find((l) => l.msg === 'model ready')
  t.match(ready, { phases: { weights: Number }, total_s: Number }, '"model ready" sums the phases up')
})

t.test('a slow adapter download shows its progress in the log and in /v1/models/{id}', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { hiddenSize: 64, numLayers: 2, seed: 3 })
  const files = join(dir, 'files')
  await buildLoraAdapter(join(files, 'team', 'slow'), { model: config, rank: 16, seed: 4 })
  const weights = await readFile(join(files, 'team', 'slow', 'adapter_model.safetensors'))

  // Serves the adapter's files; the weights trickle out over about 2.5 seconds.
  const server = createServer((req, res) => {
    const path = join(files, decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname))
    stat(path).then(
      async (info) => {
        res.writeHead(200, { 'content-length': info.size, etag: `"${info.size}"` })
        if (req.method === 'HEAD') return res.end()
        if (!path.endsWith('.safetensors')) return res.end(await readFile(path))
        const step = Math.ceil(weights.length / 25)
        for (let at = 0; at < weights.length && !res.destroyed; at += step) {
          res.write(weights.subarray(at, at + step))
          await sleep(100)
        }
        res.end()
      },
      () => {
        res.writeHead(404)
        res.end()
      },
    )
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const { port } = server.address() as AddressInfo
  const serverDir = join(dir, 'server')
  const test = await startTestServer(serverDir, modelDir, {
    plugins: [
      {
        use: `./${relative(serverDir, exampleDir)}`,
        options: { base_url: `http://127.0.0.1:${port}/`, name: 'team-files' },
      },
    ],
  })
  t.teardown(() => test.close())
  const app = test.server.app

  const generating = app.inject({
    method: 'POST',
    url: '/generate',
    payload: { inputs: 'hi', parameters: { adapter_id: 'team/slow', adapter_source: 'team-files', max_new_tokens: 2 } },
  })
  // While the weights trickle in, the adapter is shown downloading.
  let seen: { download?: Record<string, unknown> } | null = null
  const deadline = Date.now() + 10_000
  while (Date.now() < deadline) {
    const res = await app.inject({ method: 'GET', url: '/v1/models/team/slow' })
    const body = res.json() as { download?: { bytes: number } }
    if (res.statusCode === 200 && body.download && body.download.bytes > 0) {
      seen = body
      break
    }
    await sleep(50)
  }
  t.ok(seen, '/v1/models/team/slow shows the download')
  t.match(seen, {
    id: 'team/slow',
    object: 'model',
    adapter_source: 'team-files',
    download: {
      status: 'downloading',
      bytes: Number,
      total_bytes: Number,
      percent: Number,
      bytes_per_second: Number,
      started_at: String,
    },
  })
  const d = seen!.download! as { bytes: number; total_bytes: number }
  t.ok(d.bytes > 0 && d.bytes < d.total_bytes, `part of it (${d.bytes} of ${d.total_bytes} bytes)`)

  t.equal((await generating).statusCode, 200, 'the request completes once the adapter is in')
  const after = await app.inject({ method: 'GET', url: '/v1/models/team/slow' })
  t.notMatch(after.body, /downloading/, 'no download shown once it is done')

  const progress = lines(test.logs).filter((l) => l.msg === 'downloading adapter')
  t.ok(progress.length >= 1, `progress logged while it ran (${progress.length} lines)`)
  t.match(progress[0], { adapter: 'team/slow', bytes: Number, total: Number, bytes_per_second: Number })
  t.ok('eta_s' in progress[0]!, 'with the time left')
  const times = progress.map((l) => Number(l.time))
  t.ok(
    times.every((time, i) => i === 0 || time - times[i - 1]! >= 900),
    'at most one line a second',
  )
})
