/**
 * The TensorRT-LLM `Backend` on the addon built against the fake executor: tokens, end ids and stop
 * words, streaming, LoRA (weights sent once, id-only while cached, the cache-miss re-send, eviction
 * and reload under load), cancellation, shutdown and errors.
 */
import { join } from 'node:path'
import t, { type Test } from 'tap'
import {
  DEFAULT_MEDUSA_CHOICES,
  LoomError,
  type AdapterHandle,
  type GenerationEvent,
  type LocalAdapter,
} from '@loom/core'
import { buildMedusaAdapter } from '../../../core/test/engine/medusa-fixtures.ts'
import { loraTaskId } from '../src/lora-task-id.ts'
import { backendRequest, collect, expectedTokens, startHarness, tokenIds, type Harness } from './backend-harness.ts'

async function withHarness(
  t: Test,
  options: Parameters<typeof startHarness>[1] = {},
  engine: Parameters<typeof startHarness>[2] = {},
): Promise<Harness> {
  const h = await startHarness(t.testdir(), options, engine)
  t.teardown(() => h.backend.close())
  return h
}

function errorOf(fn: () => unknown): string {
  try {
    fn()
    return 'no error'
  } catch (err) {
    return err instanceof LoomError ? `${err.code}: ${err.message}` : String(err)
  }
}

async function rejection(promise: Promise<unknown>): Promise<string> {
  try {
    await promise
    return 'no error'
  } catch (err) {
    return err instanceof LoomError ? `${err.code}: ${err.message}` : String(err)
  }
}

/** An engine whose LoRA plugin adapts q and v only: the harness's adapters fill "one adapter" of its cache exactly. */
const QV_ENGINE = { loraTargetModules: ['attn_q', 'attn_v'] }

const finishOf = (events: readonly GenerationEvent[]): GenerationEvent | undefined => events.at(-1)

t.test('capabilities come from the engine config', async (t) => {
  const h = await withHarness(t, { lora_cache: { max_adapters: 6 } }, { maxLoraRank: 32, maxSeqLen: 300 })
  t.match(h.backend.capabilities(), {
    name: 'trtllm-fake',
    dtype: 'float16',
    maxContextLength: 300,
    vocabSize: h.model.vocab_size,
    maxLoraRank: 32,
    adapterSlots: 6,
    loraTargetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
    medusa: false,
    structuredOutput: false,
    modelShape: { hidden_size: 32, intermediate_size: 48, num_hidden_layers: 2, head_dim: h.model.head_dim },
  })
})

t.test('greedy and sampled requests produce the fake model tokens for what was sent', async (t) => {
  const h = await withHarness(t)
  const V = h.model.vocab_size
  const greedy = backendRequest({ inputIds: [3, 4, 5, 6], maxNewTokens: 8 })
  const events = await collect(h.backend.submit(greedy))
  t.same(tokenIds(events), expectedTokens(greedy, V))
  t.match(finishOf(events), { type: 'finish', reason: 'length' })
  const sampled = backendRequest({
    sampling: { ...greedy.sampling, temperature: 0.7, topK: 5, topP: 0.9, seed: 1234n },
    maxNewTokens: 5,
  })
  t.same(
    tokenIds(await collect(h.backend.submit(sampled))),
    expectedTokens(sampled, V),
    'seed and temperature reach it',
  )
  t.match(h.enqueued[1]!.sampling, { temperature: 0.7, topK: 5, topP: 0.9, seed: 1234n })
  // Every token carries the executor's log probability.
  for (const e of events) if (e.type === 'tokens') for (const tok of e.tokens) t.ok(tok.logprob <= 0)
})

t.test('end ids: the first ends without being output; the others are stop words that are', async (t) => {
  const h = await withHarness(t)
  const V = h.model.vocab_size
  const plain = backendRequest({ maxNewTokens: 10 })
  const tokens = expectedTokens(plain, V)
  const atTwo = tokens[2]!
  t.notOk(tokens.slice(0, 2).includes(atTwo), 'the fixture token first appears at position 2')
  const ended = await collect(h.backend.submit(backendRequest({ maxNewTokens: 10, eosTokenIds: [atTwo] })))
  t.same(tokenIds(ended), tokens.slice(0, 2))
  t.match(finishOf(ended), { type: 'finish', reason: 'eos_token' })
  t.equal(h.enqueued.at(-1)!.endId, atTwo)
  const other = V - 1 === atTwo ? V - 2 : V - 1
  const stopped = await collect(h.backend.submit(backendRequest({ maxNewTokens: 10, eosTokenIds: [other, atTwo] })))
  t.same(tokenIds(stopped), tokens.slice(0, 3), "a stop word's token is part of the output")
  t.match(finishOf(stopped), { type: 'finish', reason: 'eos_token' })
  t.same(
    h.enqueued.at(-1)!.stopWords?.map((w) => Array.from(w)),
    [[atTwo]],
  )
})

t.test('streaming: one event per step; several tokens in a step are marked as accepted together', async (t) => {
  const h = await withHarness(t, { fake: { tokens_per_step: 3 } })
  const events = await collect(h.backend.submit(backendRequest({ maxNewTokens: 7 })))
  const steps = events.filter((e) => e.type === 'tokens')
  t.ok(steps.length >= 3, `${steps.length} token events`)
  for (const step of steps) {
    if (step.type !== 'tokens') continue
    t.same(
      step.tokens.map((tok) => tok.skipped),
      step.tokens.map((_, i) => i > 0),
    )
  }
  t.equal(tokenIds(events).length, 7)
})

t.test('LoRA: weights go with the first request only; later ones send the task id', async (t) => {
  const h = await withHarness(t)
  const local = await h.lora('first')
  const handle = await h.backend.loadAdapter(local)
  t.match(handle, { key: 'local:first@r1', id: 'first', kind: 'lora', size: 4 })
  t.equal(await h.backend.loadAdapter(local), handle, 'the same key gives the same handle')
  const taskId = loraTaskId(handle.key)
  const request = backendRequest({ adapter: handle })
  const first = await collect(h.backend.submit(request))
  t.same(tokenIds(first), expectedTokens(request, h.model.vocab_size, taskId), 'the tokens of the LoRA task')
  await collect(h.backend.submit(request))
  const [a, b] = h.enqueued
  t.equal(a!.lora?.taskId, taskId)
  t.ok(a!.lora?.tensors, 'first request: weights')
  t.same(
    a!.lora!.tensors!.weightsShape,
    [4, 4 * (32 + h.model.num_attention_heads * h.model.head_dim)],
    'q_proj is the longest row',
  )
  t.equal(a!.lora!.tensors!.dtype, 'float16')
  t.same(b!.lora, { taskId }, 'second request: the id alone')
})

t.test('a cache miss is re-sent once with the weights; the client never sees it', async (t) => {
  // The cache holds one adapter: B evicts A, and A's next id-only request misses.
  const h = await withHarness(t, { lora_cache: { max_adapters: 1 } }, QV_ENGINE)
  const a = await h.backend.loadAdapter(await h.lora('a', { seed: 1 }))
  const b = await h.backend.loadAdapter(await h.lora('b', { seed: 2 }))
  const onA = backendRequest({ adapter: a })
  await collect(h.backend.submit(onA))
  await collect(h.backend.submit(backendRequest({ adapter: b })))
  const again = await collect(h.backend.submit(onA))
  t.same(tokenIds(again), expectedTokens(onA, h.model.vocab_size, loraTaskId(a.key)))
  t.match(finishOf(again), { type: 'finish', reason: 'length' })
  t.same(
    h.enqueued.map((r) => [r.lora?.taskId === loraTaskId(a.key) ? 'a' : 'b', r.lora?.tensors ? 'weights' : 'id']),
    [
      ['a', 'weights'],
      ['b', 'weights'],
      ['a', 'id'],
      ['a', 'weights'],
    ],
  )
  // Believed cached again: the next request sends the id.
  await collect(h.backend.submit(onA))
  t.notOk(h.enqueued.at(-1)!.lora?.tensors)
})

t.test('eviction and reload: 50 concurrent requests over 20 adapters, a cache of 4', async (t) => {
  const h = await withHarness(t, { lora_cache: { max_adapters: 4 }, max_batch_size: 8 }, QV_ENGINE)
  const handles: AdapterHandle[] = []
  for (let i = 0; i < 20; i++)
    handles.push(await h.backend.loadAdapter(await h.lora(`a${i}`, { seed: i, rank: 2 + (i % 3) * 2 })))
  const requests = Array.from({ length: 50 }, (_, i) =>
    backendRequest({
      id: `r${i}`,
      inputIds: [1 + i, 2, 3],
      maxNewTokens: 4 + (i % 5),
      adapter: handles[(i * 7) % 20]!,
    }),
  )
  const results = await Promise.all(requests.map((r) => collect(h.backend.submit(r))))
  results.forEach((events, i) => {
    const request = requests[i]!
    const want = expectedTokens(request, h.model.vocab_size, loraTaskId(request.adapter!.key))
    if (JSON.stringify(tokenIds(events)) !== JSON.stringify(want)) t.fail(`request ${i}: ${tokenIds(events)} ≠ ${want}`)
    if (finishOf(events)?.type !== 'finish') t.fail(`request ${i} did not finish`)
  })
  const resent = h.enqueued.length - 50
  t.ok(resent > 0, `${resent} requests re-sent after a miss or a full cache`)
  t.ok(h.enqueued.filter((r) => r.lora?.tensors).length >= 20, 'every adapter went with its weights at least once')
  t.equal(h.backend.stats().runningRequests, 0)
  t.ok(h.backend.stats().loadedAdapters <= 4, 'the cache stayed within its size')
  t.notOk(
    h.logs.some((l) => l.level === 'error'),
    'nothing logged as an error',
  )
})

t.test("Medusa: the engine's heads, the default tree, a Medusa adapter that names them", async (t) => {
  const h = await withHarness(t, {}, { medusaHeads: 3 })
  t.equal(h.backend.capabilities().medusa, true)
  t.equal(h.created[0]!.medusaChoices, DEFAULT_MEDUSA_CHOICES, "the native backend's default tree")
  const heads = (n: number): LocalAdapter => {
    const dir = join(h.dir, `medusa-${n}`)
    buildMedusaAdapter(dir, { hiddenSize: h.model.hidden_size, vocabSize: h.model.vocab_size, numHeads: n })
    return { resolved: { source: 'local', id: `medusa-${n}`, revision: 'r', files: [] }, dir, kind: 'medusa' }
  }
  const speculator = await h.backend.loadAdapter(heads(3))
  t.match(speculator, { key: 'local:medusa-3@r', id: 'medusa-3', kind: 'medusa', size: 3 })
  t.match(
    await rejection(h.backend.loadAdapter(heads(2))),
    /^adapter_invalid: .*2 heads; the TensorRT-LLM engine was built with 3/,
  )
  const request = backendRequest({ speculator, maxNewTokens: 5 })
  t.same(tokenIds(await collect(h.backend.submit(request))), expectedTokens(request, h.model.vocab_size))
  const tree = [[0], [1], [0, 0]]
  const custom = await withHarness(t, { medusa_choices: tree }, { medusaHeads: 2 })
  t.same(custom.created[0]!.medusaChoices, tree)
  const plain = await withHarness(t, { medusa_choices: tree })
  t.notOk('medusaChoices' in plain.created[0]!, 'no tree for an engine without heads')
})

t.test("guided decoding: the vocabulary at start, the request's schema as data", async (t) => {
  const h = await startHarness(t.testdir(), { guided_decoding: true }, {}, true)
  t.teardown(() => h.backend.close())
  t.equal(h.backend.capabilities().structuredOutput, true)
  const vocab = h.created[0]!.guidedDecoding!
  t.equal(vocab.encodedVocab.length, h.model.vocab_size)
  t.equal(vocab.encodedVocab[h.model.eos_token_id], '<|eos|>')
  t.same(vocab.stopTokenIds, [h.model.eos_token_id])
  t.match(JSON.parse(vocab.tokenizerJson!), { model: { type: 'BPE' } })
  const schema = { type: 'object', properties: { n: { type: 'integer' } } }
  const request = backendRequest({ grammar: { type: 'json_schema', name: 'n', schema, strict: true } })
  await collect(h.backend.submit(request))
  t.equal(h.enqueued[0]!.guidedJsonSchema, JSON.stringify(schema))
  await collect(h.backend.submit(backendRequest()))
  t.notOk('guidedJsonSchema' in h.enqueued[1]!, 'no schema without a grammar')
})

t.test(
  'cancellation: an aborted signal ends the stream with cancelled; a consumer leaving cancels silently',
  async (t) => {
    const h = await withHarness(t, { fake: { step_us: 5000 } })
    const controller = new AbortController()
    const events: GenerationEvent[] = []
    for await (const e of h.backend.submit(backendRequest({ maxNewTokens: 500, signal: controller.signal }))) {
      events.push(e)
      if (events.length === 2) controller.abort()
    }
    t.match(finishOf(events), { type: 'finish', reason: 'cancelled' })
    t.ok(tokenIds(events).length < 500)
    // Consumer leaves: breaking out cancels the executor's request.
    const stream = h.backend.submit(backendRequest({ maxNewTokens: 500 }))
    for await (const e of stream) if (e.type === 'tokens') break
    // Both requests end in the executor; close() resolves only once they have.
    await h.backend.close()
    t.equal(h.backend.stats().runningRequests, 0)
    // Already aborted: no token comes out.
    const h2 = await withHarness(t)
    const aborted = AbortSignal.abort()
    const none = await collect(h2.backend.submit(backendRequest({ signal: aborted })))
    t.equal(none.length, 1)
    t.match(none[0], { type: 'finish', reason: 'cancelled' })
  },
)

t.test('close drains: running requests finish, new work is refused; destroy fails what runs', async (t) => {
  const h = await withHarness(t, { fake: { step_us: 2000 } })
  const running = collect(h.backend.submit(backendRequest({ maxNewTokens: 20 })))
  const closed = h.backend.close()
  t.match(
    errorOf(() => h.backend.submit(backendRequest())),
    /^server_closing/,
  )
  t.match(await rejection(h.backend.loadAdapter(await h.lora('late'))), /^server_closing/)
  const events = await running
  t.equal(tokenIds(events).length, 20, 'the running request finished')
  t.match(finishOf(events), { reason: 'length' })
  await closed
  t.equal(h.backend.close(), closed, 'idempotent')

  const h2 = await withHarness(t, { fake: { step_us: 2000 } })
  const doomed = collect(h2.backend.submit(backendRequest({ maxNewTokens: 500 })))
  await new Promise((resolve) => setTimeout(resolve, 20))
  h2.backend.destroy(new Error('boom'))
  h2.backend.destroy()
  t.equal(await rejection(doomed), 'Error: boom')
  await h2.backend.close()
  t.match(
    errorOf(() => h2.backend.submit(backendRequest())),
    /^server_closing/,
  )
})

t.test('errors', async (t) => {
  const h = await withHarness(t, {}, { loraTargetModules: ['attn_q', 'attn_k', 'attn_v'], maxLoraRank: 8 })
  const refused = (overrides: Parameters<typeof backendRequest>[0]): string =>
    errorOf(() => h.backend.submit(backendRequest(overrides)))
  t.match(refused({ inputIds: Array.from({ length: 512 }, () => 1) }), /^bad_request: .*512 tokens/)
  t.match(refused({ inputIds: [h.model.vocab_size] }), /^bad_request: .*outside the vocabulary/)
  t.match(refused({ topLogprobs: 2 }), /^bad_request: .*alternative tokens/)
  t.match(
    refused({ adapter: { key: 'local:x@1', id: 'x', kind: 'lora', size: 4 } }),
    /^bad_request: .*adapter local:x@1 is not loaded/,
  )
  t.match(refused({ speculator: { key: 'k', id: 'k', kind: 'lora', size: 4 } }), /^bad_request: .*not Medusa/)
  // Adapters that do not fit the engine.
  t.match(
    await rejection(h.backend.loadAdapter(await h.lora('mlp', { targetModules: ['q_proj', 'down_proj'] }))),
    /^adapter_invalid: .*adapts down_proj, which the engine's LoRA plugin does not/,
  )
  t.match(await rejection(h.backend.loadAdapter(await h.lora('big', { rank: 16 }))), /^adapter_invalid: .*ranks 1 to 8/)
  const medusa = await h.lora('heads')
  t.match(
    await rejection(h.backend.loadAdapter({ ...medusa, kind: 'medusa' })),
    /^adapter_invalid: .*built without Medusa heads/,
  )

  const noLora = await withHarness(t, {}, { loraPlugin: null })
  t.equal(noLora.backend.capabilities().maxLoraRank, 0)
  t.equal(noLora.backend.capabilities().adapterSlots, 0)
  t.match(
    await rejection(noLora.backend.loadAdapter(await noLora.lora('x'))),
    /^adapter_invalid: .*without the LoRA plugin/,
  )
})

t.test('a full executor queue is overloaded, thrown at submit', async (t) => {
  const h = await withHarness(t, { max_batch_size: 1, max_queue_size: 1, fake: { step_us: 20000 } })
  // The first waits in the executor's queue until its next step admits it; a second does not fit.
  const queued = collect(h.backend.submit(backendRequest()))
  t.match(
    errorOf(() => h.backend.submit(backendRequest())),
    /^overloaded: .*queue is full/,
  )
  t.match((await queued).at(-1), { type: 'finish', reason: 'length' })
})

t.test('startup errors name the engine and what does not match', async (t) => {
  t.match(
    await rejection(startHarness(t.testdir(), { tensor_parallel: 2 })),
    /^model_invalid: .*built for tensor_parallel 1 × pipeline_parallel 1; the options say 2 × 1/,
  )
  t.match(
    await rejection(startHarness(t.testdir(), { guided_decoding: true })),
    /^model_invalid: .*guided_decoding is on, but this fake build .* has no guided decoding/,
  )
  t.match(
    await rejection(startHarness(t.testdir(), {}, { dtype: 'int8' as never })),
    /^model_invalid: .*pretrained_config.dtype/,
  )
})
