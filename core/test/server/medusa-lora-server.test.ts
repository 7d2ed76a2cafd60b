import { join } from 'node:path'
import t from 'tap'
import { buildLoraAdapter, buildModel, ReferenceModel } from '@loom/testkit'
import type { LoomServer } from '../../src/server/loom-server.ts'
import { buildMedusaAdapter } from '../engine/medusa-fixtures.ts'
import { startTestServer } from './test-server.ts'

/** A test server over `modelDir`'s adapters with a `speculation:` section. */
async function startServer(dir: string, modelDir: string, speculation: Record<string, unknown>): Promise<LoomServer> {
  const started = await startTestServer(dir, modelDir, {
    adapterRoot: join(modelDir, 'adapters'),
    logLevel: 'warn',
    speculation,
  })
  return started.server
}

/**
 * Medusa+LoRA adapters over HTTP (issue 17, point 2): a LoRA folder that also holds Medusa heads
 * (LoRAX's layout: `config.json` with `medusa_num_heads` and `medusa_lm_head.safetensors` beside
 * `adapter_config.json`) applies the LoRA and speculates with its own heads, even on a server
 * without default heads; the heads take a slot of their own; bad heads refuse the adapter; and
 * greedy output is the server without speculation's, alone and in mixed batches with prompt
 * lookup rows.
 */

async function generate(
  server: LoomServer,
  inputs: string,
  parameters: object,
): Promise<{ status: number; ids: number[]; logprobs: number[]; skipped: number; body: unknown }> {
  const res = await server.app.inject({
    method: 'POST',
    url: '/generate',
    payload: { inputs, parameters: { details: true, max_new_tokens: 24, ...parameters } },
  })
  const body = res.json() as { details?: { tokens: { id: number; logprob: number }[]; skipped_tokens: number } }
  if (res.statusCode !== 200) return { status: res.statusCode, ids: [], logprobs: [], skipped: 0, body }
  return {
    status: 200,
    ids: body.details!.tokens.map((tok) => tok.id),
    logprobs: body.details!.tokens.map((tok) => tok.logprob),
    skipped: body.details!.skipped_tokens,
    body,
  }
}

async function metric(server: LoomServer, name: string): Promise<number> {
  const text = (await server.app.inject({ method: 'GET', url: '/metrics' })).body
  return Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN)
}

t.test('a LoRA with its own Medusa heads: loaded, validated, counted, lossless', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { arch: 'llama', hiddenSize: 64, numLayers: 2, seed: 31 })
  const adapters = join(modelDir, 'adapters')
  const H = config.hidden_size
  const V = config.vocab_size
  const lm = Float32Array.from((await ReferenceModel.load(modelDir)).weight('lm_head.weight'))
  // kjv: a LoRA with heads (heads that repeat the model's next token: right whenever it repeats).
  await buildLoraAdapter(join(adapters, 'kjv'), { model: config, rank: 8, seed: 3, initScale: 0.5 })
  buildMedusaAdapter(join(adapters, 'kjv'), { hiddenSize: H, vocabSize: V, numHeads: 3, lmHeads: [lm, lm, lm] })
  // plain: a LoRA alone; bad: a LoRA whose heads are for another hidden size.
  await buildLoraAdapter(join(adapters, 'plain'), { model: config, rank: 8, seed: 5, initScale: 0.5 })
  await buildLoraAdapter(join(adapters, 'bad'), { model: config, rank: 8, seed: 7, initScale: 0.5 })
  buildMedusaAdapter(join(adapters, 'bad'), { hiddenSize: H * 2, vocabSize: V, numHeads: 3 })

  // Speculation off (`max_batch_size: 0`): the adapter's heads load but never run.
  const reference = await startServer(join(dir, 'plain'), modelDir, { max_batch_size: 0 })
  t.teardown(() => reference.close())
  // No default heads: the adapter's own heads still speculate; other rows use prompt lookup.
  const server = await startServer(join(dir, 'own'), modelDir, { prompt_lookup: { ngram_size: 3, draft_tokens: 4 } })
  t.teardown(() => server.close())

  const requests = Array.from({ length: 9 }, (_, i) => ({
    inputs: `Prompt ${i}: ${'one two three '.repeat(1 + (i % 3))}`,
    parameters: [{}, { adapter_id: 'kjv' }, { adapter_id: 'plain' }][i % 3]!,
  }))
  const expected = await Promise.all(requests.map((r) => generate(reference, r.inputs, r.parameters)))

  // Alone first: the adapter's heads are loaded beside its LoRA (two slots) and verify trees.
  const before = await metric(server, 'loom_speculation_verify_steps')
  const alone = await generate(server, requests[1]!.inputs, { adapter_id: 'kjv' })
  t.same(alone.ids, expected[1]!.ids, 'alone: the tokens of the server without speculation')
  t.ok((await metric(server, 'loom_speculation_verify_steps')) > before, 'its own heads verified trees')
  t.equal(await metric(server, 'loom_adapters_loaded'), 2, 'the LoRA and its heads each hold a slot')

  // Mixed batches: base and plain-LoRA rows (prompt lookup) beside the Medusa+LoRA rows.
  const got = await Promise.all(requests.map((r) => generate(server, r.inputs, r.parameters)))
  requests.forEach((r, i) =>
    t.same(got[i]!.ids, expected[i]!.ids, `mixed, request ${i} (${JSON.stringify(r.parameters)})`),
  )
  // Lossless to the bit on the cpu device (f32 weights): a tree node's logits are its decode
  // row's, whatever shares the step (backend-cuda-native README, "Same bits alone, batched and
  // speculated"), so every reported logprob is the plain server's exactly.
  requests.forEach((r, i) =>
    t.strictSame(got[i]!.logprobs, expected[i]!.logprobs, `mixed, request ${i}: the same logprobs, bit for bit`),
  )
  t.equal(
    expected.reduce((n, g) => n + g.skipped, 0),
    0,
    'no skipped tokens without speculation',
  )
  t.comment(`skipped tokens with speculation: ${got.map((g) => g.skipped).join(', ')}`)

  const bad = await generate(server, 'x', { adapter_id: 'bad' })
  t.equal(bad.status, 422, 'heads that do not fit the model refuse the adapter')
  t.match(bad.body, { error: /hidden_size/ })
})
