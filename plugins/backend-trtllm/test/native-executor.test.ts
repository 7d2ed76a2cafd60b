// The addon on the fake executor: predictable tokens, streaming deltas, end ids and stop words, the
// bounded batch, cancel, shutdown, stats, argument errors, and a process that exits on its own.
import { spawnSync } from 'node:child_process'
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { fakeToken, type NativeRequest, type NativeResponse } from '../src/native-api.ts'
import { loadTrtllm, requireTensorrtLlm, TRTLLM_ADDON_PATH } from '../src/load-native.ts'

const GREEDY = { topK: 1, topP: 0, temperature: 1, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0 }
const VOCAB = 50

/** An executor whose responses are gathered per request; `done(id)` resolves with all of them. */
async function start(options: {
  maxBatchSize?: number
  stepUs?: number
  tokensPerStep?: number
  maxQueueSize?: number
}) {
  const byId = new Map<number, NativeResponse[]>()
  const waiters = new Map<number, (r: NativeResponse[]) => void>()
  const order: number[] = []
  const ex = await loadTrtllm().create(
    {
      engineDir: '/nonexistent-engine',
      maxBatchSize: options.maxBatchSize ?? 4,
      ...(options.maxQueueSize === undefined ? {} : { maxQueueSize: options.maxQueueSize }),
      fake: { stepUs: options.stepUs ?? 1000, tokensPerStep: options.tokensPerStep ?? 1, vocabSize: VOCAB },
    },
    (batch) => {
      for (const r of batch) {
        const list = byId.get(r.requestId) ?? []
        list.push(r)
        byId.set(r.requestId, list)
        if (r.final) {
          order.push(r.requestId)
          waiters.get(r.requestId)?.(list)
        }
      }
    },
  )
  const done = (id: number) =>
    new Promise<NativeResponse[]>((resolve) => {
      const list = byId.get(id)
      if (list?.at(-1)?.final) resolve(list)
      else waiters.set(id, resolve)
    })
  return { ex, done, byId, order }
}

function request(prompt: number[], extra: Partial<NativeRequest> = {}): NativeRequest {
  return { inputIds: Int32Array.from(prompt), maxTokens: 6, streaming: true, sampling: GREEDY, ...extra }
}

/** What the fake generates for a prompt (no end id, no stop words). */
function expected(prompt: number[], n: number, taskId = 0, seed = 0n, temperature = 1): number[] {
  return Array.from(
    { length: n },
    (_, position) => fakeToken({ inputIds: prompt, taskId, seed, temperature, position }, VOCAB).token,
  )
}

const tokensOf = (list: readonly NativeResponse[]) => list.flatMap((r) => Array.from(r.tokens))

t.test('the addon links the fake, and the Backend can refuse it', async (t) => {
  const addon = loadTrtllm()
  t.equal(addon.capabilities.impl, 'fake')
  t.equal(addon.capabilities.abiVersion, 2)
  t.equal(addon.capabilities.libraryPath, undefined, 'the fake runs on no TensorRT-LLM library')
  t.equal(addon.capabilities.guidedDecoding, false)
  t.throws(() => requireTensorrtLlm(addon, false), { code: 'native_addon_missing', message: /TRTLLM_ROOT/ })
  t.doesNotThrow(() => requireTensorrtLlm(addon, true))
  t.throws(() => loadTrtllm(path.join(path.dirname(TRTLLM_ADDON_PATH), 'missing.node')), {
    code: 'native_addon_missing',
    message: /does not exist.*build\.mjs/s,
  })
})

t.test('streaming deltas carry the predicted tokens; seed, temperature and task change them', async (t) => {
  const { ex, done } = await start({ tokensPerStep: 2 })
  t.teardown(() => ex.shutdown())
  const prompt = [5, 6, 7]
  const a = ex.enqueue(request(prompt, { maxTokens: 7, clientId: 42, returnLogProbs: true }))
  const list = await done(a)
  t.same(tokensOf(list), expected(prompt, 7))
  t.same(
    list.map((r) => r.tokens.length),
    [2, 2, 2, 1],
    'two tokens per step, the last response has what is left',
  )
  t.ok(list.every((r) => r.clientId === 42))
  t.same(
    list.map((r) => r.final),
    [false, false, false, true],
  )
  t.equal(list.at(-1)?.finishReason, 'length')
  const lp = list.flatMap((r) => Array.from(r.logProbs ?? []))
  t.same(
    lp.map((x) => Math.round(x * 100)),
    expected(prompt, 7).map((_, position) =>
      Math.round(fakeToken({ inputIds: prompt, taskId: 0, seed: 0n, temperature: 1, position }, VOCAB).logProb * 100),
    ),
  )

  const seeded = await done(ex.enqueue(request(prompt, { sampling: { ...GREEDY, seed: 9n }, streaming: false })))
  t.equal(seeded.length, 1, 'not streaming: one final response')
  t.same(tokensOf(seeded), expected(prompt, 6, 0, 9n))
  t.notSame(tokensOf(seeded), expected(prompt, 6))
  const hot = await done(ex.enqueue(request(prompt, { sampling: { ...GREEDY, temperature: 0.5 } })))
  t.same(tokensOf(hot), expected(prompt, 6, 0, 0n, 0.5))
  t.equal(list[0]?.logProbs instanceof Float32Array, true)
  t.equal(hot[0]?.logProbs, undefined, 'no log probabilities unless asked')
})

t.test('end ids stop without being output; stop words stop with theirs; minTokens delays both', async (t) => {
  const { ex, done } = await start({})
  t.teardown(() => ex.shutdown())
  const prompt = [1, 2]
  const all = expected(prompt, 20)
  const endId = all[3] as number
  const firstEnd = all.indexOf(endId)
  const ended = await done(ex.enqueue(request(prompt, { maxTokens: 20, endId })))
  t.same(tokensOf(ended), all.slice(0, firstEnd))
  t.equal(ended.at(-1)?.finishReason, 'end_id')

  const word = Int32Array.from(all.slice(4, 6))
  const stopped = await done(ex.enqueue(request(prompt, { maxTokens: 20, stopWords: [word] })))
  t.same(tokensOf(stopped).slice(-2), Array.from(word))
  t.equal(stopped.at(-1)?.finishReason, 'stop_words')

  const late = await done(
    ex.enqueue(request(prompt, { maxTokens: 20, endId, sampling: { ...GREEDY, minTokens: firstEnd + 1 } })),
  )
  t.ok(tokensOf(late).length > firstEnd, 'the end id before minTokens is output and ignored')

  const bad = Int32Array.of(all[0] as number)
  const avoided = await done(ex.enqueue(request(prompt, { maxTokens: 3, badWords: [bad] })))
  t.equal(tokensOf(avoided)[0], ((all[0] as number) + 1) % VOCAB, 'a bad word is bumped to the next id')
})

t.test('the batch is bounded: requests beyond it wait in the queue', async (t) => {
  const { ex, done, order } = await start({ maxBatchSize: 2, stepUs: 5000 })
  t.teardown(() => ex.shutdown())
  const ids = [1, 2, 3, 4, 5].map((k) => ex.enqueue(request([k], { maxTokens: 4 })))
  await new Promise((r) => setTimeout(r, 12))
  const s = ex.stats()
  t.equal(s.maxActiveRequests, 2)
  t.ok(s.activeRequests <= 2, `at most 2 active (${s.activeRequests})`)
  t.ok(s.queuedRequests >= 1, `the rest queued (${s.queuedRequests})`)
  await Promise.all(ids.map(done))
  t.same(order.slice(0, 2).sort(), ids.slice(0, 2), 'the first two finish first')
  t.equal(ex.stats().activeRequests, 0)
  t.ok(ex.stats().iteration > 0)
})

t.test('a full queue refuses with overloaded', async (t) => {
  const { ex, done } = await start({ maxBatchSize: 1, maxQueueSize: 1, stepUs: 20000 })
  t.teardown(() => ex.shutdown())
  const a = ex.enqueue(request([1], { maxTokens: 2 }))
  t.throws(() => ex.enqueue(request([2])), { code: 'overloaded', message: /queue is full/ })
  await done(a)
})

t.test('cancel gives a final response with reason cancelled, running or queued', async (t) => {
  const { ex, done } = await start({ maxBatchSize: 1, stepUs: 2000 })
  t.teardown(() => ex.shutdown())
  const running = ex.enqueue(request([1], { maxTokens: 1000 }))
  const queued = ex.enqueue(request([2], { maxTokens: 1000 }))
  await new Promise((r) => setTimeout(r, 20))
  ex.cancel(running)
  ex.cancel(queued)
  ex.cancel(123456) // unknown ids are ignored
  const [r, q] = await Promise.all([done(running), done(queued)])
  t.equal(r.at(-1)?.finishReason, 'cancelled')
  t.equal(r.at(-1)?.final, true)
  t.ok(tokensOf(r).length < 1000)
  t.same(tokensOf(r), expected([1], tokensOf(r).length), 'tokens before the cancel are the model’s')
  t.equal(q.at(-1)?.finishReason, 'cancelled')
  t.same(tokensOf(q), [])
})

t.test('shutdown ends unfinished requests, refuses new work and is idempotent', async (t) => {
  const { ex, done } = await start({ maxBatchSize: 1, stepUs: 5000 })
  const a = ex.enqueue(request([1], { maxTokens: 1000 }))
  const b = ex.enqueue(request([2], { maxTokens: 1000 }))
  const first = ex.shutdown()
  t.equal(ex.shutdown(), first, 'the same promise')
  t.throws(() => ex.enqueue(request([3])), { code: 'server_closing' })
  await first
  const [ra, rb] = [await done(a), await done(b)]
  for (const list of [ra, rb]) {
    t.equal(list.at(-1)?.finishReason, 'error')
    t.equal(list.at(-1)?.errorKind, 'shut_down')
  }
  t.doesNotThrow(() => ex.cancel(a), 'cancel after shutdown is a no-op')
  t.throws(() => ex.stats(), { code: 'server_closing' })
  await ex.shutdown()
})

t.test('arguments are checked at the boundary, naming the field and the value', async (t) => {
  const { ex } = await start({})
  t.teardown(() => ex.shutdown())
  const cases: [Partial<NativeRequest> | Record<string, unknown>, RegExp][] = [
    [{ inputIds: new Int32Array(0) }, /input_ids: at least 1 token/],
    [{ inputIds: [1, 2] as unknown as Int32Array }, /inputIds: expected Int32Array \[tokens\], got an array/],
    [{ inputIds: Float32Array.of(1) as unknown as Int32Array }, /expected Int32Array .*got Float32Array \[1\]/],
    [{ maxTokens: 0 }, /maxTokens: expected an integer in \[1, 2147483647\], got 0/],
    [{ sampling: { ...GREEDY, temperature: 0 } }, /temperature: must be a finite number > 0.*got 0/],
    [{ sampling: { ...GREEDY, topP: 2 } }, /topP: expected a number in \[0, 1\], got 2/],
    [{ sampling: { ...GREEDY, seed: 1 as unknown as bigint } }, /sampling\.seed: expected a bigint, got a number/],
    [{ stopWords: [new Int32Array(0)] }, /stop_words\[0\]: a word needs at least 1 token/],
    [{ guidedJsonSchema: '{}' }, /guided decoding/],
  ]
  for (const [extra, message] of cases) {
    t.throws(() => ex.enqueue({ ...request([1]), ...extra } as NativeRequest), { message }, String(message))
  }
  t.throws(() => ex.enqueue({ ...request([1]), guidedJsonSchema: '{}' }), { code: 'grammar_unsupported' })
  t.throws(() => ex.enqueue({ ...request([1]), maxTokens: -1 }), { code: 'native_error' })
  const worker = path.join(t.testdir(), 'executorWorker')
  writeFileSync(worker, '#!/bin/sh\n')
  chmodSync(worker, 0o755)
  const full = await loadTrtllm().create(
    {
      engineDir: '/x',
      medusaChoices: [[0], [0, 0], [1]],
      deviceIds: [0, 1],
      tensorParallel: 2,
      workerPath: worker,
      enableKvCacheBlockReuse: true,
      enableChunkedContext: true,
      kvCacheFreeGpuMemoryFraction: 0.5,
      guidedDecoding: { encodedVocab: ['a', 'b'], tokenizerJson: '{}', stopTokenIds: [1] },
    },
    () => {},
  )
  await full.shutdown()
  const badOptions: [Record<string, unknown>, RegExp][] = [
    [{ medusaChoices: [[0], []] }, /medusa_choices\[1\]: a path needs at least 1 entry/],
    [{ medusaChoices: [[-1]] }, /medusaChoices\[0\]\[0\]: expected an integer >= 0/],
    [{ deviceIds: [0.5] }, /deviceIds\[0\]: expected an integer >= 0/],
    [{ kvCacheFreeGpuMemoryFraction: 2 }, /kvCacheFreeGpuMemoryFraction: expected a number in \[0, 1\], got 2/],
    [{ guidedDecoding: { encodedVocab: ['a', 3] } }, /guidedDecoding\.encodedVocab\[1\]: expected a string/],
    [{ tensorParallel: 2, deviceIds: [0] }, /device_ids: one per rank is needed .* = 2\); got 1/],
    [{ parallelMode: 'single', tensorParallel: 2 }, /comm_mode: SINGLE runs one process, .* = 2 needs ORCHESTRATOR/],
    [{ parallelMode: 'mpi' }, /parallelMode: expected 'auto', 'single', 'leader' or 'orchestrator', got 'mpi'/],
    [{ workerPath: 7 }, /workerPath: expected a string, got a number/],
  ]
  for (const [options, message] of badOptions) {
    await t.rejects(
      loadTrtllm().create({ engineDir: '/x', ...options }, () => {}),
      { code: 'native_error', message },
    )
  }
  await t.rejects(
    loadTrtllm().create({ engineDir: '' }, () => {}),
    { code: 'native_error', message: /engine_dir: a directory is required/ },
  )
})

t.test('the process exits by itself: after shutdown, and with an idle executor never shut down', async (t) => {
  const dir = t.testdir()
  for (const [name, body] of [
    ['shutdown.mjs', 'const id = ex.enqueue(req); await new Promise((r) => setTimeout(r, 20)); await ex.shutdown()'],
    ['forgotten.mjs', 'ex.enqueue({ ...req, maxTokens: 2 }); await new Promise((r) => setTimeout(r, 50))'],
    ['in-flight.mjs', 'ex.enqueue({ ...req, maxTokens: 30 })'],
  ] as const) {
    writeFileSync(
      path.join(dir, name),
      `import { createRequire } from 'node:module'
const addon = createRequire(import.meta.url)(${JSON.stringify(TRTLLM_ADDON_PATH)})
let finals = 0
const ex = await addon.create({ engineDir: '/x', fake: { stepUs: 1000 } }, (b) => { finals += b.filter((r) => r.final).length })
const req = { inputIds: Int32Array.of(1, 2), maxTokens: 1000, streaming: true,
  sampling: { topK: 1, topP: 0, temperature: 1, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0 } }
${body}
process.on('exit', () => console.log('finals=' + finals))
`,
    )
  }
  for (const [name, finals] of [
    ['shutdown.mjs', 1],
    ['forgotten.mjs', 1],
    ['in-flight.mjs', 1],
  ] as const) {
    const run = spawnSync(process.execPath, [path.join(dir, name)], { encoding: 'utf8', timeout: 20000 })
    t.equal(run.status, 0, `${name} exits with 0 (${run.stderr})`)
    t.equal(run.signal, null, `${name} was not killed by the timeout`)
    t.match(run.stdout, `finals=${finals}`, `${name}: every request got its final response`)
  }
})

t.test('multi-GPU: the fake receives the communication mode and the worker path, and checks the worker', async (t) => {
  const dir = t.testdir()
  const worker = path.join(dir, 'bin', 'executorWorker')
  mkdirSync(path.dirname(worker))
  writeFileSync(worker, '#!/bin/sh\n')
  chmodSync(worker, 0o755)
  const single = await loadTrtllm().create({ engineDir: '/x' }, () => {})
  t.same(single.info(), { parallelMode: 'single', worldSize: 1, spawnedWorkers: 0, deviceIds: [] })
  await single.shutdown()

  // tp × pp > 1 with the default mode: orchestrator, one spawned worker per rank.
  const orchestrated = await loadTrtllm().create(
    { engineDir: '/x', tensorParallel: 2, pipelineParallel: 2, deviceIds: [3, 2, 1, 0], workerPath: worker },
    () => {},
  )
  const expectedInfo = {
    parallelMode: 'orchestrator',
    worldSize: 4,
    spawnedWorkers: 4,
    workerPath: worker,
    deviceIds: [3, 2, 1, 0],
  }
  t.same(orchestrated.info(), expectedInfo)
  // It still serves from this one process.
  const id = orchestrated.enqueue(request([1, 2], { streaming: false, maxTokens: 2 }))
  t.ok(id > 0)
  await orchestrated.shutdown()
  t.same(orchestrated.info(), expectedInfo, 'info() answers after shutdown')

  // Named explicitly, and leader mode (which spawns nothing, so needs no worker).
  const named = await loadTrtllm().create(
    { engineDir: '/x', tensorParallel: 2, parallelMode: 'orchestrator', workerPath: worker },
    () => {},
  )
  t.match(named.info(), { parallelMode: 'orchestrator', spawnedWorkers: 2, workerPath: worker })
  await named.shutdown()
  const leader = await loadTrtllm().create({ engineDir: '/x', tensorParallel: 2, parallelMode: 'leader' }, () => {})
  t.same(leader.info(), { parallelMode: 'leader', worldSize: 2, spawnedWorkers: 0, deviceIds: [] })
  await leader.shutdown()
  // One GPU: a worker path is not used.
  const ignored = await loadTrtllm().create({ engineDir: '/x', workerPath: '/nonexistent/executorWorker' }, () => {})
  t.equal(ignored.info().workerPath, undefined)
  await ignored.shutdown()

  // What TensorRT-LLM would fail on in MPI_Comm_spawn is refused at create, naming worker_path.
  const notExecutable = path.join(dir, 'not-executable')
  writeFileSync(notExecutable, '')
  chmodSync(notExecutable, 0o644)
  const refused: [Record<string, unknown>, RegExp][] = [
    [
      {},
      /worker_path: TensorRT-LLM's executorWorker is required \(orchestrator mode spawns 2 executorWorker processes\)/,
    ],
    [{ workerPath: '' }, /worker_path: TensorRT-LLM's executorWorker is required/],
    [{ workerPath: path.join(dir, 'missing') }, /worker_path: .*missing does not exist \(orchestrator mode spawns 2/],
    [{ workerPath: notExecutable }, /worker_path: .*not-executable is not an executable file/],
    [{ workerPath: path.dirname(worker) }, /worker_path: .*bin is not an executable file/],
  ]
  for (const [extra, message] of refused) {
    await t.rejects(
      loadTrtllm().create({ engineDir: '/x', tensorParallel: 2, ...extra }, () => {}),
      { code: 'native_error', message },
      String(message),
    )
  }
})
