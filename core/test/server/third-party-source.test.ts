import { createReadStream } from 'node:fs'
import { stat } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

const exampleDir = fileURLToPath(new URL('../../../examples/source-http-files', import.meta.url))
const SECRET = 'sk-loom-test-7f3a9c1e5b'

/**
 * Acceptance (issue 2): the third-party plugin in examples/ is loaded by path from YAML, and a
 * request naming its adapter_source reaches it; the adapter it serves behaves exactly like the same
 * files served by the local source. Also: the caller's token never reaches the logs.
 */
t.test('an adapter from the example http-files source generates like the local copy', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { seed: 3 })
  const adapters = join(dir, 'files')
  await buildLoraAdapter(join(adapters, 'team', 'poet'), { model: config, rank: 8, seed: 9 })

  const requested: string[] = []
  const files = createServer((req, res) => {
    requested.push(`${req.method} ${req.url}`)
    const path = join(adapters, decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname))
    stat(path).then(
      (info) => {
        res.writeHead(200, { 'content-length': info.size, etag: `"${info.size}-${info.mtimeMs}"` })
        if (req.method === 'HEAD') res.end()
        else createReadStream(path).pipe(res)
      },
      () => {
        res.writeHead(404)
        res.end()
      },
    )
  })
  await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => files.close(() => resolve())))
  const { port } = files.address() as AddressInfo

  const serverDir = join(dir, 'server')
  const test = await startTestServer(serverDir, modelDir, {
    adapterRoot: adapters,
    // Log everything, so the secret check below covers every log line the server can write.
    logLevel: 'trace',
    plugins: [
      {
        use: `./${relative(serverDir, exampleDir)}`,
        options: { base_url: `http://127.0.0.1:${port}/`, name: 'team-files' },
      },
    ],
  })
  t.teardown(() => test.close())
  const generate = async (parameters: Record<string, unknown>, headers: Record<string, string> = {}) => {
    const res = await test.server.app.inject({
      method: 'POST',
      url: '/generate',
      headers,
      payload: { inputs: 'Shall I compare thee', parameters: { max_new_tokens: 10, ...parameters } },
    })
    return { status: res.statusCode, body: res.json() as { generated_text: string; error?: string } }
  }

  const viaPlugin = await generate(
    { adapter_id: 'team/poet', adapter_source: 'team-files', api_token: SECRET },
    { authorization: `Bearer ${SECRET}` },
  )
  t.equal(viaPlugin.status, 200)
  t.ok(
    requested.some((r) => r === 'GET /team/poet/adapter_model.safetensors'),
    'the request reached the example source',
  )
  const viaLocal = await generate({ adapter_id: 'team/poet', adapter_source: 'local' })
  t.equal(viaPlugin.body.generated_text, viaLocal.body.generated_text, 'same adapter, same text')
  const base = await generate({})
  t.not(base.body.generated_text, viaLocal.body.generated_text, 'the adapter changes the output')

  const missing = await generate({ adapter_id: 'team/nobody', adapter_source: 'team-files' })
  t.equal(missing.status, 404)
  t.same(missing.body, {
    error: 'Adapter `team/nobody` was not found in source `team-files`',
    error_type: 'not_found',
  })
  const unknown = await generate({ adapter_id: 'x', adapter_source: 'nope' })
  t.equal(unknown.status, 422)
  t.match(unknown.body.error, /Unknown adapter_source `nope`; this server knows: local, team-files/)

  // What a caller fetched from a non-listing source may be private to it: /v1/models does not
  // tell others about it.
  const models = (await test.server.app.inject({ method: 'GET', url: '/v1/models' })).json() as {
    data: { id: string; adapter_source?: string; revision?: string | null }[]
  }
  t.notOk(
    models.data.some((m) => m.adapter_source === 'team-files'),
    'the adapter used from team-files is not listed',
  )
  t.equal(models.data[0]!.id, 'test-model', 'the base model is listed first')

  const logs = test.logs.join('')
  t.match(logs, /incoming request/, 'request logs were captured')
  t.notMatch(logs, SECRET, 'the token never appears in the logs')
})
