import { join } from 'node:path'
import t from 'tap'
import { FakeHostedServer, buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from '../../../core/test/server/test-server.ts'

const TOKEN = 'pb-e2e-private-token-71c2a'
const OTHER = 'pb-e2e-other-token-0b9d4'

/**
 * Acceptance (issue 4): an adapter from the hosted repository (`adapter_source: pbase`) generates
 * exactly like the same files from the local source; the private adapter works with the token in
 * the body and in the header; a revoked token is refused on the very next request although the
 * adapter is cached; no token reaches the logs.
 */
t.test('a private hosted adapter over /generate', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const model = await buildModel(modelDir, { seed: 5 })
  const adapters = join(dir, 'adapters')
  await buildLoraAdapter(join(adapters, 'poet'), { model, rank: 8, seed: 21 })

  const fake = await FakeHostedServer.start()
  t.teardown(() => fake.close())
  await fake.addVersion('poet', 1, { dir: join(adapters, 'poet') })
  await fake.addVersion('poet', 2, { dir: join(adapters, 'poet') }, 'training')
  fake.addToken(TOKEN, ['poet'])
  fake.addToken(OTHER, [])

  const test = await startTestServer(join(dir, 'server'), modelDir, {
    adapterRoot: adapters,
    logLevel: 'trace',
    plugins: [{ use: '@loom/source-hosted', options: { endpoint: fake.url, retry_base_ms: 5 } }],
  })
  t.teardown(() => test.close())
  const generate = async (parameters: Record<string, unknown>, headers: Record<string, string> = {}) => {
    const res = await test.server.app.inject({
      method: 'POST',
      url: '/generate',
      headers,
      payload: { inputs: 'Shall I compare thee', parameters: { max_new_tokens: 10, ...parameters } },
    })
    return {
      status: res.statusCode,
      body: res.json() as { generated_text: string; error?: string; error_type?: string },
    }
  }

  const local = await generate({ adapter_id: 'poet', adapter_source: 'local' })
  t.equal(local.status, 200)
  const base = await generate({})
  t.not(base.body.generated_text, local.body.generated_text, 'the adapter changes the output')

  const inBody = await generate({ adapter_id: 'poet/1', adapter_source: 'pbase', api_token: TOKEN })
  t.equal(inBody.status, 200, 'token in parameters.api_token')
  t.equal(inBody.body.generated_text, local.body.generated_text, 'same adapter, same text')
  const inHeader = await generate(
    { adapter_id: 'poet/1', adapter_source: 'pbase' },
    { authorization: `Bearer ${TOKEN}` },
  )
  t.equal(inHeader.status, 200, 'token in Authorization: Bearer')
  t.equal(inHeader.body.generated_text, local.body.generated_text)
  t.equal(fake.downloads('poet', 1, 'adapter_model.safetensors'), 1, 'the weights were downloaded once')
  const latest = await generate({ adapter_id: 'poet', adapter_source: 'pbase', api_token: TOKEN })
  t.equal(latest.body.generated_text, local.body.generated_text, '`poet` is the latest completed version')
  // `poet` and `poet/1` are separate cache keys (the id is kept as the request named it): one more download.
  t.equal(fake.downloads('poet', 1, 'adapter_model.safetensors'), 2)

  const none = await generate({ adapter_id: 'poet/1', adapter_source: 'pbase' })
  t.equal(none.status, 401, 'no token')
  t.match(none.body, { error_type: 'unauthorized', error: /Adapter `poet\/1` requires a token/ })
  const forbidden = await generate({ adapter_id: 'poet/1', adapter_source: 'pbase', api_token: OTHER })
  t.equal(forbidden.status, 403, 'a token without access')
  const notReady = await generate({ adapter_id: 'poet/2', adapter_source: 'pbase', api_token: TOKEN })
  t.equal(notReady.status, 503)
  t.match(notReady.body.error, /Adapter `poet\/2` from `pbase` is not ready for use \(status `training`\)/)
  const missing = await generate({ adapter_id: 'poet/9', adapter_source: 'pbase', api_token: TOKEN })
  t.equal(missing.status, 404)

  const checksBefore = fake.metadataRequests('poet')
  fake.revokeToken(TOKEN)
  const revoked = await generate({ adapter_id: 'poet/1', adapter_source: 'pbase', api_token: TOKEN })
  t.equal(revoked.status, 401, 'a revoked token is refused on the very next request')
  t.match(revoked.body, { error_type: 'unauthorized', error: /The token was refused for adapter `poet\/1`/ })
  t.notOk(revoked.body.generated_text, 'no generation ran')
  t.ok(fake.metadataRequests('poet') > checksBefore, 'the repository was asked again')
  const revokedHeader = await generate(
    { adapter_id: 'poet/1', adapter_source: 'pbase' },
    { authorization: `Bearer ${TOKEN}` },
  )
  t.equal(revokedHeader.status, 401)
  t.equal(fake.downloads('poet', 1, 'adapter_model.safetensors'), 2, 'no new download: the adapter stayed cached')

  const logs = test.logs.join('')
  t.match(logs, /incoming request/, 'request logs were captured')
  t.notMatch(logs, TOKEN, 'the token never appears in the logs')
  t.notMatch(logs, OTHER)
})
