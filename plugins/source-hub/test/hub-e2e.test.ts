import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { FakeHub, buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer, type TestServer } from '../../../core/test/server/test-server.ts'

// One token in the hub's own format, one without the `hf_` prefix that the logger's patterns would
// not recognise: the log check below then covers what the plugin itself writes.
const READER = 'hf_e2e_reader_5b1f0c9a7d3e'
const PLAIN = 'loom-e2e-plain-token-92c4e7'
const PROMPT = 'Shall I compare thee'

interface GenerateAnswer {
  status: number
  body: { generated_text?: string; error?: string; error_type?: string }
}

/**
 * Acceptance (issue 4) over HTTP: a real Loom server (native CPU backend) with the hub plugin
 * pointed at a fake hub on loopback.
 */
t.test('adapters from the hub over /generate', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { seed: 3 })
  const adapters = join(dir, 'adapters')
  await buildLoraAdapter(join(adapters, 'acme', 'poet'), { model: config, rank: 8, seed: 9 })
  await buildLoraAdapter(join(adapters, 'acme', 'crowd'), { model: config, rank: 4, seed: 11 })

  const hub = await FakeHub.start()
  t.teardown(() => hub.close())
  await hub.addRepo('acme/poet', join(adapters, 'acme', 'poet'))
  await hub.addRepo('acme/secret', join(adapters, 'acme', 'poet'), { private: true })
  await hub.addRepo('acme/crowd', join(adapters, 'acme', 'crowd'))
  await hub.addRepo('acme/fragile', join(adapters, 'acme', 'poet'))
  hub.addToken(READER, { canRead: ['acme/secret'] })
  hub.addToken(PLAIN, { canRead: ['acme/secret'] })

  const serverDir = join(dir, 'server')
  const test: TestServer = await startTestServer(serverDir, modelDir, {
    adapterRoot: adapters,
    logLevel: 'trace',
    plugins: [{ use: '@loom/source-hub', options: { hub_url: hub.url, retries: 1 } }],
  })
  t.teardown(() => test.close())
  const cacheDir = join(serverDir, 'cache')

  const generate = async (
    parameters: Record<string, unknown>,
    headers: Record<string, string> = {},
  ): Promise<GenerateAnswer> => {
    const res = await test.server.app.inject({
      method: 'POST',
      url: '/generate',
      headers,
      payload: { inputs: PROMPT, parameters: { max_new_tokens: 8, ...parameters } },
    })
    return { status: res.statusCode, body: res.json() }
  }
  const fromHub = (id: string, extra: Record<string, unknown> = {}) => ({
    adapter_id: id,
    adapter_source: 'hub',
    ...extra,
  })

  await t.test('(a) a hub adapter generates like the same files from the local source', async (t) => {
    const viaHub = await generate(fromHub('acme/poet'))
    t.equal(viaHub.status, 200, JSON.stringify(viaHub.body))
    const viaLocal = await generate({ adapter_id: 'acme/poet', adapter_source: 'local' })
    t.equal(viaLocal.status, 200)
    t.equal(viaHub.body.generated_text, viaLocal.body.generated_text, 'same adapter, same text')
    const base = await generate({})
    t.not(base.body.generated_text, viaHub.body.generated_text, 'the adapter changes the output')
    const pinned = await generate(fromHub(`acme/poet@${hub.sha('acme/poet')}`))
    t.equal(pinned.body.generated_text, viaHub.body.generated_text, '@sha names the same adapter')
    t.equal(hub.downloads('acme/poet', 'adapter_model.safetensors'), 1, 'and shares its cache entry')
  })

  await t.test('(b) a private adapter with the token in the body or the header', async (t) => {
    const reference = await generate(fromHub('acme/poet'))
    const none = await generate(fromHub('acme/secret'))
    t.equal(none.status, 401)
    t.same(none.body, {
      error:
        'Adapter `acme/secret` requires a token (the hub has no public repository `acme/secret`: it is private, gated or missing; send a token that can read it): send `api_token` or `Authorization: Bearer`',
      error_type: 'unauthorized',
    })
    const inBody = await generate(fromHub('acme/secret', { api_token: READER }))
    t.equal(inBody.status, 200, JSON.stringify(inBody.body))
    t.equal(inBody.body.generated_text, reference.body.generated_text)
    const inHeader = await generate(fromHub('acme/secret'), { authorization: `Bearer ${PLAIN}` })
    t.equal(inHeader.status, 200, JSON.stringify(inHeader.body))
    t.equal(inHeader.body.generated_text, reference.body.generated_text)
    const wrong = await generate(fromHub('acme/secret', { api_token: 'hf_not_a_real_token_000' }))
    t.equal(wrong.status, 401)
    t.equal(wrong.body.error_type, 'unauthorized')
    const stranger = 'hf_e2e_stranger_40af'
    hub.addToken(stranger)
    const forbidden = await generate(fromHub('acme/secret'), { authorization: `Bearer ${stranger}` })
    t.equal(forbidden.status, 403)
    t.equal(forbidden.body.error_type, 'forbidden')
  })

  await t.test(
    'an unrelated Authorization key (an SDK api key) neither reaches the hub nor breaks a public adapter',
    async (t) => {
      const sdkKey = 'sk-any-gateway-key-1234'
      const res = await generate(fromHub('acme/poet'), { authorization: `Bearer ${sdkKey}` })
      t.equal(res.status, 200, JSON.stringify(res.body))
      t.notOk(
        hub.requests.some((r) => r.token === sdkKey),
        'no request to the hub carried the key',
      )
    },
  )

  await t.test('(c) a token revoked after its adapter was cached is refused at once, nothing runs', async (t) => {
    const warm = await generate(fromHub('acme/secret', { api_token: PLAIN }))
    t.equal(warm.status, 200)
    const downloads = hub.downloads('acme/secret', 'adapter_model.safetensors')
    hub.revokeToken(PLAIN)
    const seen = hub.requests.length
    const refused = await generate(fromHub('acme/secret', { api_token: PLAIN }))
    t.equal(refused.status, 401)
    t.same(refused.body, {
      error:
        'The token was refused for adapter `acme/secret`: the hub does not accept the token (unknown, expired or revoked)',
      error_type: 'unauthorized',
    })
    t.match(test.server.backend.stats(), { runningRequests: 0, queuedRequests: 0 }, 'no request is running or queued')
    t.equal(hub.downloads('acme/secret', 'adapter_model.safetensors'), downloads, 'no new download')
    t.same(
      hub.requests.slice(seen).map((r) => `${r.method} ${r.path} ${r.status}`),
      ['GET /api/models/acme/secret/revision/HEAD 401'],
      'only the access check reached the hub: the adapter was never resolved or acquired',
    )
    hub.addToken(PLAIN, { canRead: ['acme/secret'] })
  })

  await t.test('(d) 100 concurrent requests for one cold adapter: one download, 100 answers', async (t) => {
    const answers = await Promise.all(Array.from({ length: 100 }, () => generate(fromHub('acme/crowd'))))
    t.same(
      answers.map((a) => a.status),
      Array.from({ length: 100 }, () => 200),
      JSON.stringify(answers.find((a) => a.status !== 200)?.body ?? null),
    )
    const texts = new Set(answers.map((a) => a.body.generated_text))
    t.equal(texts.size, 1, 'all the same text')
    t.equal(hub.downloads('acme/crowd', 'adapter_model.safetensors'), 1, 'exactly one download of the weights')
    t.equal(hub.downloads('acme/crowd', 'adapter_config.json'), 1)
  })

  await t.test('(e) a download cut halfway leaves no cache entry; the next request downloads again', async (t) => {
    // Each of the core's 2 download attempts (adapters.download_attempts, default 2) makes 2 tries
    // (the plugin's retries: 1): four cut deliveries fail the request.
    hub.dropNext(4, { repo: 'acme/fragile', path: 'adapter_model.safetensors' })
    const failed = await generate(fromHub('acme/fragile'))
    t.equal(failed.status, 502)
    t.equal(failed.body.error_type, 'download_adapter')
    t.match(
      failed.body.error,
      /^Downloading adapter `acme\/fragile` from `hub` failed: GET adapter_model.safetensors: terminated \(.+\) after \d+ bytes$/,
    )
    t.equal(hub.downloads('acme/fragile', 'adapter_model.safetensors'), 4, 'tried 2 × 2 times')
    const entries = await readdir(join(cacheDir, 'hub')).catch(() => [] as string[])
    t.notOk(entries.includes('acme_2Ffragile'), 'no cache entry for the adapter')
    t.same(await readdir(join(cacheDir, '.tmp')).catch(() => []), [], 'no partial download left behind')

    const retried = await generate(fromHub('acme/fragile'))
    t.equal(retried.status, 200, JSON.stringify(retried.body))
    t.equal(retried.body.generated_text, (await generate(fromHub('acme/poet'))).body.generated_text)
    t.equal(hub.downloads('acme/fragile', 'adapter_model.safetensors'), 5, 'downloaded again')
    t.same(await readdir(join(cacheDir, 'hub', 'acme_2Ffragile')), [hub.sha('acme/fragile')])
  })

  await t.test('damaged bytes are never cached', async (t) => {
    await hub.addRepo('acme/damaged', join(adapters, 'acme', 'poet'))
    hub.corruptNext(6, { repo: 'acme/damaged', path: 'adapter_model.safetensors' })
    const failed = await generate(fromHub('acme/damaged'))
    t.equal(failed.status, 502)
    t.match(failed.body.error, /adapter_model.safetensors has sha256 [0-9a-f]{64}, the hub listed [0-9a-f]{64}$/)
    const entries = await readdir(join(cacheDir, 'hub')).catch(() => [] as string[])
    t.notOk(entries.includes('acme_2Fdamaged'), 'no cache entry')
    const next = await generate(fromHub('acme/damaged'))
    t.equal(next.status, 200, JSON.stringify(next.body))
  })

  await t.test('(f) no token appears in any log line', async (t) => {
    const logs = test.logs.join('')
    t.match(logs, /incoming request/, 'request logs were captured')
    t.match(logs, /downloading adapter from the hub/, 'the plugin logged')
    for (const token of [READER, PLAIN, 'hf_not_a_real_token_000', 'hf_e2e_stranger_40af']) {
      t.notMatch(logs, token, 'the token never appears in the logs')
    }
  })
})
