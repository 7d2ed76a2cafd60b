import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { mkdirSync, writeFileSync } from 'node:fs'
import t, { type Test } from 'tap'
import {
  buildLoraAdapter,
  buildModel,
  readReferenceLora,
  writeSafetensors,
  type HfModelConfig,
  type Projection,
  type ReferenceLora,
  type TensorToWrite,
} from '@loom/testkit'
import { mergeStats } from '../../src/adapters/merge/adapter-merger.ts'
import { dareUniform } from '../../src/adapters/merge/merge-lora.ts'
import { refDelta, refMerge } from '../adapters/merge/reference-merge.ts'
import { startTestServer } from './test-server.ts'

/**
 * Acceptance (issue 7, merging): a `merged_adapters` request against the real server gives the
 * same tokens and logprobs as one ordinary adapter whose weights were merged offline by the same
 * formula; identical requests reuse the cached merge; every private input is authorized on every
 * request; bad requests fail naming the field.
 */
const authPlugin = fileURLToPath(new URL('../openai/fixtures-auth-plugin.ts', import.meta.url))
const MODULES: readonly Projection[] = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']

function shapeOf(config: HfModelConfig, module: Projection): [number, number] {
  const q = config.num_attention_heads * config.head_dim
  const kv = config.num_key_value_heads * config.head_dim
  const h = config.hidden_size
  const i = config.intermediate_size
  return {
    q_proj: [q, h],
    k_proj: [kv, h],
    v_proj: [kv, h],
    o_proj: [h, q],
    gate_proj: [i, h],
    up_proj: [i, h],
    down_proj: [h, i],
  }[module] as [number, number]
}

const moduleName = (layer: number, m: Projection) =>
  `model.layers.${layer}.${['gate_proj', 'up_proj', 'down_proj'].includes(m) ? 'mlp' : 'self_attn'}.${m}`

/** Write per-module factors `(A [r, in], B [out, r])` as a PEFT adapter with scale 1 everywhere. */
function writeAdapter(
  dir: string,
  modules: { layer: number; module: Projection; rank: number; a: ArrayLike<number>; b: ArrayLike<number> }[],
) {
  mkdirSync(dir, { recursive: true })
  const tensors: Record<string, TensorToWrite> = {}
  const pattern: Record<string, number> = {}
  for (const m of modules) {
    const name = moduleName(m.layer, m.module)
    const inF = m.a.length / m.rank
    const outF = m.b.length / m.rank
    tensors[`base_model.model.${name}.lora_A.weight`] = {
      dtype: 'F32',
      shape: [m.rank, inF],
      data: Float32Array.from(m.a),
    }
    tensors[`base_model.model.${name}.lora_B.weight`] = {
      dtype: 'F32',
      shape: [outF, m.rank],
      data: Float32Array.from(m.b),
    }
    pattern[name] = m.rank
  }
  const r = Math.max(...Object.values(pattern))
  const config = {
    peft_type: 'LORA',
    r,
    lora_alpha: r,
    target_modules: [...MODULES],
    rank_pattern: pattern,
    alpha_pattern: pattern,
  }
  writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify(config))
  writeSafetensors(join(dir, 'adapter_model.safetensors'), tensors)
}

/** Offline `linear`: A' = [w_i s_i A_i] stacked, B' = [B_i] side by side (exactly Σ w_i s_i B_i A_i). */
function offlineLinear(dir: string, config: HfModelConfig, loras: ReferenceLora[], weights: number[]) {
  const modules = []
  for (let layer = 0; layer < config.num_hidden_layers; layer++) {
    for (const module of MODULES) {
      const [out, inF] = shapeOf(config, module)
      const parts = loras.map((l, i) => ({ m: l.layers[layer]![module]!, w: weights[i]! }))
      const rank = parts.reduce((s, p) => s + p.m.rank, 0)
      const a: number[] = []
      const b = new Array<number>(out * rank).fill(0)
      let off = 0
      for (const { m, w } of parts) {
        for (const x of m.a) a.push(Math.fround(w * m.scale * x))
        for (let o = 0; o < out; o++) for (let k = 0; k < m.rank; k++) b[o * rank + off + k] = m.b[o * m.rank + k]!
        off += m.rank
      }
      if (a.length !== rank * inF) throw new Error('offline linear: wrong A size')
      modules.push({ layer, module, rank, a, b })
    }
  }
  writeAdapter(dir, modules)
}

/**
 * Offline ties / dare: merge the dense updates with the reference formula, then write the dense
 * result as a full-rank adapter (`A = I`, `B = M`, or `A = M`, `B = I`): no approximation at all.
 */
function offlineDense(
  dir: string,
  config: HfModelConfig,
  loras: ReferenceLora[],
  weights: number[],
  strategy: 'ties' | 'dare_ties' | 'dare_linear',
  density: number,
  seed: number,
) {
  const modules = []
  for (let layer = 0; layer < config.num_hidden_layers; layer++) {
    for (const module of MODULES) {
      const [out, inF] = shapeOf(config, module)
      // The server densifies in f32; round the same way so the trimming sees the same values.
      const deltas = loras.map((l) => refDelta(l.layers[layer]![module]!, out, inF).map(Math.fround))
      const m = refMerge(deltas, weights, strategy, density, 'total', (i) => dareUniform(seed, i, layer, module))
      const eye = (n: number) => Array.from({ length: n * n }, (_, k) => (k % (n + 1) === 0 ? 1 : 0))
      if (inF <= out) modules.push({ layer, module, rank: inF, a: eye(inF), b: m })
      else modules.push({ layer, module, rank: out, a: m, b: eye(out) })
    }
  }
  writeAdapter(dir, modules)
}

t.test('merged adapters over HTTP', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const adapters = join(modelDir, 'adapters')
  const config = await buildModel(modelDir, { hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, seed: 5 })
  const all = { model: config, targetModules: [...MODULES], initScale: 0.6 }
  await buildLoraAdapter(join(adapters, 'a'), { ...all, rank: 8, alpha: 16, seed: 1 })
  await buildLoraAdapter(join(adapters, 'b'), { ...all, rank: 8, alpha: 8, seed: 2 })
  // Rank 32 + 32 = 64 >= every projection's smaller side: ties/dare results are exactly representable.
  await buildLoraAdapter(join(adapters, 'big1'), { ...all, rank: 32, alpha: 32, seed: 3 })
  await buildLoraAdapter(join(adapters, 'big2'), { ...all, rank: 32, alpha: 64, seed: 4 })
  await buildLoraAdapter(join(adapters, 'secret'), { ...all, rank: 8, seed: 6 })
  const ref = (id: string) => readReferenceLora(join(adapters, id), config)
  offlineLinear(join(adapters, 'offline-linear'), config, [ref('a'), ref('b')], [0.5, 0.5])
  for (const strategy of ['ties', 'dare_linear', 'dare_ties'] as const) {
    offlineDense(
      join(adapters, `offline-${strategy}`),
      config,
      [ref('big1'), ref('big2')],
      [0.7, 0.5],
      strategy,
      0.5,
      3,
    )
  }

  const serverDir = join(dir, 'server')
  const start = () =>
    startTestServer(serverDir, modelDir, {
      adapterRoot: adapters,
      plugins: [{ use: `./${relative(serverDir, authPlugin)}`, options: { token: 'right-token', protect: 'secret' } }],
    })
  const test = await start()
  t.teardown(() => test.close())

  type Details = { tokens: { id: number; logprob: number }[]; prefill: { id: number; logprob: number | null }[] }
  const post = async (server: typeof test, parameters: Record<string, unknown>, inputs = 'The merged adapter says') => {
    const res = await server.server.app.inject({
      method: 'POST',
      url: '/generate',
      payload: {
        inputs,
        parameters: { max_new_tokens: 10, details: true, decoder_input_details: true, ...parameters },
      },
    })
    return {
      status: res.statusCode,
      headers: res.headers,
      body: res.json() as { generated_text: string; details: Details; error?: string },
    }
  }
  const generate = async (t: Test, parameters: Record<string, unknown>, inputs?: string) => {
    const res = await post(test, parameters, inputs)
    t.equal(res.status, 200, `HTTP 200 (${res.body.error ?? ''})`)
    return res.body.details
  }
  const sameLogits = (t: Test, got: Details, want: Details, tol: number, label: string) => {
    t.same(
      got.tokens.map((x) => x.id),
      want.tokens.map((x) => x.id),
      `${label}: same greedy tokens`,
    )
    const logprobs = (d: Details) => [...d.prefill.slice(1).map((p) => p.logprob!), ...d.tokens.map((x) => x.logprob)]
    const worst = logprobs(got).reduce((m, lp, i) => Math.max(m, Math.abs(lp - logprobs(want)[i]!)), 0)
    t.ok(worst <= tol, `${label}: prompt and generated logprobs agree (max diff ${worst})`)
  }

  t.test('a merged response names its inputs in x-adapter-id, as LoRAX does', async (t) => {
    const res = await post(test, { merged_adapters: { ids: ['a', 'b'], weights: [0.5, 0.5] } })
    t.equal(res.headers['x-adapter-id'], 'a,b')
    t.equal(res.headers['x-adapter-source'], 'local')
  })

  t.test('linear (0.5, 0.5) equals the adapter merged offline by the same formula', async (t) => {
    const merged = await generate(t, { merged_adapters: { ids: ['a', 'b'], weights: [0.5, 0.5] } })
    const offline = await generate(t, { adapter_id: 'offline-linear' })
    sameLogits(t, merged, offline, 1e-5, 'linear')
    const base = await generate(t, {})
    const onlyA = await generate(t, { adapter_id: 'a' })
    t.not(merged.tokens.map((x) => x.logprob).join(), base.tokens.map((x) => x.logprob).join(), 'differs from the base')
    t.not(merged.tokens.map((x) => x.logprob).join(), onlyA.tokens.map((x) => x.logprob).join(), 'differs from a alone')
  })

  const seen = new Map<string, string>()
  for (const strategy of ['ties', 'dare_linear', 'dare_ties'] as const) {
    t.test(`${strategy} equals the reference merge written as a dense adapter`, async (t) => {
      const merged = await generate(t, {
        merged_adapters: {
          ids: ['big1', 'big2'],
          weights: [0.7, 0.5],
          merge_strategy: strategy,
          density: 0.5,
          seed: 3,
        },
      })
      const offline = await generate(t, { adapter_id: `offline-${strategy}` })
      // Not bitwise: the server re-factors the dense result by SVD (exact here, up to f32 rounding).
      sameLogits(t, merged, offline, 5e-5, strategy)
      seen.set(strategy, merged.tokens.map((x) => x.logprob).join())
    })
  }
  t.test('the strategies really differ', async (t) => {
    const linear = await generate(t, { merged_adapters: { ids: ['big1', 'big2'], weights: [0.7, 0.5] } })
    t.equal(new Set([...seen.values(), linear.tokens.map((x) => x.logprob).join()]).size, 4)
  })

  t.test('v1 endpoints take the same merge through the `merged_adapters` extension field', async (t) => {
    const v1 = async (url: string, payload: Record<string, unknown>) => {
      const res = await test.server.app.inject({
        method: 'POST',
        url,
        payload: { temperature: 0, max_tokens: 8, ...payload },
      })
      return {
        status: res.statusCode,
        body: res.json() as {
          choices?: { text?: string; message?: { content: string } }[]
          error?: { param: string; message: string }
        },
      }
    }
    const merge = { ids: ['a', 'b'], weights: [0.5, 0.5] }
    const merged = await v1('/v1/completions', { model: '', prompt: 'Once upon a time', merged_adapters: merge })
    const offline = await v1('/v1/completions', { model: 'offline-linear', prompt: 'Once upon a time' })
    t.equal(merged.status, 200)
    t.equal(
      merged.body.choices![0]!.text,
      offline.body.choices![0]!.text,
      'completions: same text as the offline merge',
    )
    const base = await v1('/v1/completions', { model: '', prompt: 'Once upon a time' })
    t.not(merged.body.choices![0]!.text, base.body.choices![0]!.text, 'and not the base model text')
    const messages = [{ role: 'user', content: 'Hi' }]
    const chat = await v1('/v1/chat/completions', { model: 'test-model', messages, merged_adapters: merge })
    const chatOffline = await v1('/v1/chat/completions', { model: 'offline-linear', messages })
    t.equal(chat.status, 200)
    t.equal(chat.body.choices![0]!.message!.content, chatOffline.body.choices![0]!.message!.content, 'chat too')
    const both = await v1('/v1/chat/completions', { model: 'a', messages, merged_adapters: merge })
    t.equal(both.status, 422)
    t.equal(both.body.error!.param, 'merged_adapters')
    const mismatch = await v1('/v1/completions', {
      model: '',
      prompt: 'x',
      merged_adapters: { ids: ['a'], weights: [] },
    })
    t.equal(mismatch.body.error!.param, 'merged_adapters.weights')
  })

  t.test('the second identical request reuses the merge; a restart reuses the disk cache', async (t) => {
    const request = { merged_adapters: { ids: ['a', 'b'], weights: [0.25, 0.75], merge_strategy: 'linear' } }
    const before = mergeStats()
    const first = await generate(t, request)
    t.equal(mergeStats().computed, before.computed + 1, 'first request computes the merge')
    const second = await generate(t, request)
    t.equal(mergeStats().computed, before.computed + 1, 'second identical request: no recomputation')
    t.equal(mergeStats().memoryHits, before.memoryHits + 1, 'served from the loaded merge')
    t.same(second.tokens, first.tokens)
    // Irrelevant parameters (density for linear) do not split the cache.
    await generate(t, { merged_adapters: { ...request.merged_adapters, density: 0.9 } })
    t.equal(mergeStats().computed, before.computed + 1, 'density is ignored by linear')
    await generate(t, { merged_adapters: { ...request.merged_adapters, weights: [0.75, 0.25] } })
    t.equal(mergeStats().computed, before.computed + 2, 'other weights: a new merge')
    const concurrent = { merged_adapters: { ...request.merged_adapters, weights: [0.1, 0.9] } }
    await Promise.all([generate(t, concurrent), generate(t, concurrent), generate(t, concurrent)])
    t.equal(mergeStats().computed, before.computed + 3, 'concurrent identical requests share one computation')

    await test.close()
    const again = await start()
    t.teardown(() => again.close())
    const res = await post(again, request)
    t.equal(res.status, 200)
    t.equal(mergeStats().computed, before.computed + 3, 'after a restart: no recomputation')
    t.equal(mergeStats().diskHits, before.diskHits + 1, 'read from the adapter cache')
    t.same(res.body.details.tokens, first.tokens)
    t.equal(
      (await post(again, { merged_adapters: { ids: ['a', 'secret'], weights: [1, 1] } })).status,
      401,
      'a private input is refused without a token',
    )
    t.equal(
      (await post(again, { merged_adapters: { ids: ['a', 'secret'], weights: [1, 1] }, api_token: 'right-token' }))
        .status,
      200,
    )
  })
})

t.test('authorization runs for every private input on every request; errors name the field', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const adapters = join(modelDir, 'adapters')
  const config = await buildModel(modelDir, { hiddenSize: 32, numLayers: 1, numHeads: 2, numKvHeads: 1, seed: 8 })
  await buildLoraAdapter(join(adapters, 'public'), { model: config, rank: 4, seed: 1 })
  await buildLoraAdapter(join(adapters, 'secret'), { model: config, rank: 4, seed: 2 })
  const serverDir = join(dir, 'server')
  const test = await startTestServer(serverDir, modelDir, {
    adapterRoot: adapters,
    plugins: [{ use: `./${relative(serverDir, authPlugin)}`, options: { token: 'right-token', protect: 'secret' } }],
    adapters: { auth_ttl_s: 0 },
  })
  t.teardown(() => test.close())
  const post = async (parameters: Record<string, unknown>) => {
    const res = await test.server.app.inject({
      method: 'POST',
      url: '/generate',
      payload: { inputs: 'Hello', parameters: { max_new_tokens: 3, ...parameters } },
    })
    return { status: res.statusCode, body: res.json() as { error?: string; error_type?: string } }
  }
  const merge = { merged_adapters: { ids: ['public', 'secret'], weights: [0.5, 0.5] } }

  const missing = await post(merge)
  t.equal(missing.status, 401)
  t.match(missing.body.error, /secret/, 'the error names the private input')
  t.equal((await post({ ...merge, api_token: 'wrong' })).status, 401)
  const before = mergeStats().computed
  t.equal((await post({ ...merge, api_token: 'right-token' })).status, 200)
  t.equal(mergeStats().computed, before + 1)
  t.equal((await post(merge)).status, 401, 'the cached merge is still refused without the token')
  t.equal((await post({ ...merge, api_token: 'wrong' })).status, 401, 'and with a wrong one')
  t.equal((await post({ ...merge, api_token: 'right-token' })).status, 200)
  t.equal(mergeStats().computed, before + 1, 'still one computation')
  // Order does not bypass the check.
  t.equal((await post({ merged_adapters: { ids: ['secret', 'public'], weights: [1, 0] } })).status, 401)

  const bad: [Record<string, unknown>, number, RegExp][] = [
    [{ adapter_id: 'public', ...merge }, 422, /`parameters\.merged_adapters` cannot be combined with `adapter_id`/],
    [{ merged_adapters: { ids: ['public'], weights: [1, 2] } }, 422, /`parameters\.merged_adapters\.weights`/],
    [{ merged_adapters: { ids: [], weights: [] } }, 422, /`parameters\.merged_adapters\.ids` must hold at least one/],
    [
      { merged_adapters: { ids: ['public'], weights: [1], merge_strategy: 'ties' } },
      422,
      /`parameters\.merged_adapters\.density`/,
    ],
    [{ merged_adapters: { ids: ['public', 'nope'], weights: [1, 1] } }, 404, /nope/],
    [{ merged_adapters: { ids: ['public'], weights: [1] }, adapter_source: 'hub' }, 422, /adapter_source/],
  ]
  for (const [parameters, status, message] of bad) {
    const res = await post(parameters)
    t.equal(res.status, status, JSON.stringify(parameters))
    t.match(res.body.error, message)
  }
})
