import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import t from 'tap'
import { stringify } from 'yaml'
import { buildLoraAdapter, buildModel, ReferenceModel } from '@loom/testkit'
import { loadConfig } from '../../src/config/index.ts'
import { LoomServer } from '../../src/server/loom-server.ts'
import { buildMedusaAdapter } from '../engine/medusa-fixtures.ts'

/**
 * Medusa over HTTP (issue 7, acceptance 1 and 3): a server with a default Medusa adapter gives
 * the greedy output of a server without one, for base and LoRA requests, and reports the accepted
 * candidates as skipped tokens; a per-request Medusa adapter with the default's head count is
 * accepted, one with another head count is `medusa_heads_mismatch`, and any per-request Medusa
 * adapter on a server without a default is `medusa_no_default`.
 *
 */

async function startServer(dir: string, modelDir: string, speculation: object | null): Promise<LoomServer> {
  await mkdir(dir, { recursive: true })
  const doc = {
    server: { port: 0, host: '127.0.0.1', log_level: 'warn' },
    model: { id: 'test-model', path: modelDir },
    limits: { max_total_tokens: 256 },
    adapters: { default_source: 'local', cache_dir: join(dir, 'cache'), preload: [] },
    ...(speculation === null ? {} : { speculation }),
    plugins: [
      { use: '@loom/backend-cuda-native', options: { device: 'cpu', threads: 2, kv_cache_tokens: 4096 } },
      { use: '@loom/source-local', options: { roots: [join(modelDir, 'adapters')] } },
    ],
  }
  const file = join(dir, 'loom.yaml')
  await writeFile(file, stringify(doc))
  const quiet = new Writable({ write: (_chunk, _encoding, done) => done() })
  const server = await LoomServer.create(await loadConfig(file), { logDestination: quiet })
  try {
    await server.start()
  } catch (err) {
    await server.close()
    throw err
  }
  return server
}

interface Generated {
  status: number
  ids: number[]
  logprobs: number[]
  skipped: number
  error: { error: string; error_type: string } | null
}

async function generate(server: LoomServer, inputs: string, parameters: object): Promise<Generated> {
  const res = await server.app.inject({
    method: 'POST',
    url: '/generate',
    payload: { inputs, parameters: { details: true, max_new_tokens: 20, ...parameters } },
  })
  if (res.statusCode !== 200) return { status: res.statusCode, ids: [], logprobs: [], skipped: 0, error: res.json() }
  const body = res.json() as {
    details: { tokens: { id: number; logprob: number; skipped: boolean }[]; skipped_tokens: number }
  }
  const ids = body.details.tokens.map((tok) => tok.id)
  const logprobs = body.details.tokens.map((tok) => tok.logprob)
  if (body.details.tokens.filter((tok) => tok.skipped).length !== body.details.skipped_tokens)
    throw new Error('skipped_tokens disagrees with the skipped flags')
  return { status: 200, ids, logprobs, skipped: body.details.skipped_tokens, error: null }
}

t.test('default and per-request Medusa over /generate', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { arch: 'llama', hiddenSize: 64, numLayers: 2, seed: 31 })
  const adapters = join(modelDir, 'adapters')
  await buildLoraAdapter(join(adapters, 'lora'), { model: config, rank: 8, seed: 3, initScale: 0.5 })
  const H = config.hidden_size
  const V = config.vocab_size
  const lm = Float32Array.from((await ReferenceModel.load(modelDir)).weight('lm_head.weight'))
  buildMedusaAdapter(join(adapters, 'medusa-default'), {
    hiddenSize: H,
    vocabSize: V,
    numHeads: 4,
    lmHeads: [lm, lm, lm, lm],
  })
  buildMedusaAdapter(join(adapters, 'medusa-other'), {
    hiddenSize: H,
    vocabSize: V,
    numHeads: 4,
    blocks: 'random',
    seed: 2,
  })
  buildMedusaAdapter(join(adapters, 'medusa-3'), {
    hiddenSize: H,
    vocabSize: V,
    numHeads: 3,
    blocks: 'random',
    seed: 4,
  })

  const plain = await startServer(join(dir, 'plain'), modelDir, null)
  t.teardown(() => plain.close())
  const medusa = await startServer(join(dir, 'medusa'), modelDir, { medusa_adapter: { id: 'medusa-default' } })
  t.teardown(() => medusa.close())

  // Issue 13 point 6: Medusa heads are not models. `/v1/models` lists the base model and LoRAs
  // only, though the local root holds three heads; retrieving one is a 404 like any unknown id,
  // and `/info` names the default heads instead.
  for (const server of [plain, medusa]) {
    const models = (await server.app.inject({ method: 'GET', url: '/v1/models' })).json() as { data: { id: string }[] }
    t.same(
      models.data.map((m) => m.id),
      ['test-model', 'lora'],
      '/v1/models: base model and LoRA only',
    )
    for (const id of ['medusa-default', 'medusa-other']) {
      const res = await server.app.inject({ method: 'GET', url: `/v1/models/${id}` })
      t.equal(res.statusCode, 404, `/v1/models/${id} is not a model`)
    }
  }
  t.equal((await plain.app.inject({ method: 'GET', url: '/info' })).json().speculator, null, 'no speculator')
  t.same(
    (await medusa.app.inject({ method: 'GET', url: '/info' })).json().speculator,
    { kind: 'medusa', adapter_id: 'medusa-default', adapter_source: 'local', heads: 4 },
    '/info names the default Medusa heads',
  )

  const requests = Array.from({ length: 12 }, (_, i) => ({
    inputs: `Prompt number ${i}: ${'abc '.repeat(i % 4)}`,
    parameters: i % 2 === 0 ? {} : { adapter_id: 'lora' },
  }))
  const expected = await Promise.all(requests.map((r) => generate(plain, r.inputs, r.parameters)))
  const got = await Promise.all(requests.map((r) => generate(medusa, r.inputs, r.parameters)))
  requests.forEach((r, i) =>
    t.same(got[i]!.ids, expected[i]!.ids, `request ${i} (${r.parameters.adapter_id ?? 'base'})`),
  )
  // Lossless to the bit on the cpu device: verified tokens carry their decode rows' logprobs.
  requests.forEach((r, i) =>
    t.strictSame(got[i]!.logprobs, expected[i]!.logprobs, `request ${i}: the same logprobs, bit for bit`),
  )
  t.equal(
    expected.reduce((n, g) => n + g.skipped, 0),
    0,
    'no skipped tokens without Medusa',
  )
  t.comment(`skipped tokens with the default Medusa: ${got.reduce((n, g) => n + g.skipped, 0)}`)
  const metrics = (await medusa.app.inject({ method: 'GET', url: '/metrics' })).body
  const verifySteps = Number(/^loom_speculation_verify_steps (\d+)$/m.exec(metrics)?.[1])
  t.ok(verifySteps > 0, `/metrics counts verification steps (${verifySteps})`)
  t.match(metrics, /^loom_speculation_head_proposed\{head="0"\} [1-9]\d*$/m, 'and per-head proposals')
  t.match(metrics, /^loom_speculation_mean_accepted_per_step \d/m)

  const other = await generate(medusa, requests[0]!.inputs, { adapter_id: 'medusa-other' })
  t.equal(other.status, 200, 'per-request Medusa with the default head count')
  t.same(other.ids, expected[0]!.ids, 'and still lossless')

  // Sampling under a grammar does not speculate: the seeded text is the plain server's, every time.
  const constrained = { do_sample: true, seed: 11, response_format: { type: 'json_object' }, max_new_tokens: 24 }
  const plainJson = await generate(plain, 'Give JSON: ', constrained)
  const steps = async () =>
    Number(
      /^loom_speculation_verify_steps (\d+)$/m.exec(
        (await medusa.app.inject({ method: 'GET', url: '/metrics' })).body,
      )?.[1],
    )
  const stepsBefore = await steps()
  for (let run = 0; run < 3; run++) {
    const got = await generate(medusa, 'Give JSON: ', constrained)
    t.same(got.ids, plainJson.ids, `constrained sampling, run ${run}: the plain server's tokens`)
    t.equal(got.skipped, 0, 'no speculation under a grammar when sampling')
  }
  t.equal(await steps(), stepsBefore, 'no verification step ran for them')

  const mismatch = await generate(medusa, 'x', { adapter_id: 'medusa-3' })
  t.equal(mismatch.status, 422)
  t.match(mismatch.error, {
    error_type: 'load_adapter',
    error: /`medusa-3` has 3 heads; .* the 4 heads of the default/,
  })

  const noDefault = await generate(plain, 'x', { adapter_id: 'medusa-other' })
  t.equal(noDefault.status, 422)
  t.match(noDefault.error, { error_type: 'load_adapter', error: /without a default Medusa adapter/ })
})
