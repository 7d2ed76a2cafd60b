// The fake's LoRA cache through the addon: weights are stored under a task id and change the tokens,
// an id-only request for a task not cached gets TensorRT-LLM's exact error, the cache evicts the least
// recently used task no running request uses, and the tensors' shapes are checked at enqueue.
import t from 'tap'
import { fakeToken, type NativeLoraWeights, type NativeRequest, type NativeResponse } from '../src/native-api.ts'
import { loadTrtllm } from '../src/load-native.ts'

const GREEDY = { topK: 1, topP: 0, temperature: 1, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0 }
const VOCAB = 1000
const MISS = (id: number) => `LoRA task ${id} not found in cache. Please send LoRA weights with request`

/** `rows` module-layers of a rank-2 adapter on attn_q, in float16 raw words: [rows, 16] and [rows, 3]. */
function tensors(rows: number, dtype: NativeLoraWeights['dtype'] = 'float16'): NativeLoraWeights {
  const maxRow = 16
  const config = new Int32Array(rows * 3)
  for (let i = 0; i < rows; i++) config.set([1, i, 2], i * 3) // (module attn_q, layer i, rank 2)
  const n = rows * maxRow
  return {
    weights: dtype === 'float32' ? new Float32Array(n) : new Uint16Array(n),
    dtype,
    weightsShape: [rows, maxRow],
    config,
    configShape: [rows, 3],
  }
}

async function start(loraCacheHostModuleLayers: number, maxBatchSize = 8) {
  const finals = new Map<number, NativeResponse>()
  const all = new Map<number, NativeResponse[]>()
  const waiters = new Map<number, (r: NativeResponse[]) => void>()
  const ex = await loadTrtllm().create(
    { engineDir: '/x', maxBatchSize, loraCacheHostModuleLayers, fake: { stepUs: 500, vocabSize: VOCAB } },
    (batch) => {
      for (const r of batch) {
        const list = all.get(r.requestId) ?? []
        list.push(r)
        all.set(r.requestId, list)
        if (r.final) {
          finals.set(r.requestId, r)
          waiters.get(r.requestId)?.(list)
        }
      }
    },
  )
  const done = (id: number) =>
    new Promise<NativeResponse[]>((resolve) => {
      if (finals.has(id)) resolve(all.get(id) ?? [])
      else waiters.set(id, resolve)
    })
  return { ex, done }
}

function request(taskId: number | null, withWeights: number | false, maxTokens = 4): NativeRequest {
  return {
    inputIds: Int32Array.of(3, 1, 4),
    maxTokens,
    streaming: true,
    sampling: GREEDY,
    ...(taskId === null
      ? {}
      : { lora: { taskId, ...(withWeights === false ? {} : { tensors: tensors(withWeights) }) } }),
  }
}

const tokensOf = (list: readonly NativeResponse[]) => list.flatMap((r) => Array.from(r.tokens))
const predicted = (taskId: number, n: number) =>
  Array.from(
    { length: n },
    (_, position) => fakeToken({ inputIds: [3, 1, 4], taskId, seed: 0n, temperature: 1, position }, VOCAB).token,
  )

t.test('weights are cached under the task id, which changes the tokens; id-only reuses them', async (t) => {
  const { ex, done } = await start(64)
  t.teardown(() => ex.shutdown())
  const base = tokensOf(await done(ex.enqueue(request(null, false))))
  const first = tokensOf(await done(ex.enqueue(request(7, 4))))
  const again = tokensOf(await done(ex.enqueue(request(7, false))))
  t.same(base, predicted(0, 4))
  t.same(first, predicted(7, 4))
  t.notSame(first, base, 'the adapter changes the output')
  t.same(again, first, 'an id-only request uses the cached task')
  const s = ex.stats()
  t.equal(s.loraTasksCached, 1)
  t.equal(s.loraCacheModuleLayersUsed, 4)
  t.equal(s.loraCacheModuleLayersTotal, 64)
})

t.test('an id-only request for an unknown task gets the exact cache-miss error', async (t) => {
  const { ex, done } = await start(64)
  t.teardown(() => ex.shutdown())
  const list = await done(ex.enqueue({ ...request(41, false), clientId: 5 }))
  t.equal(list.length, 1)
  const r = list[0] as NativeResponse
  t.equal(r.final, true)
  t.equal(r.finishReason, 'error')
  t.equal(r.errorKind, 'lora_not_cached')
  t.equal(r.error, MISS(41))
  t.equal(r.clientId, 5)
  t.same(Array.from(r.tokens), [])
  // The retry with weights, as the Backend does, succeeds.
  t.same(tokensOf(await done(ex.enqueue(request(41, 2)))), predicted(41, 4))
})

t.test('a full cache evicts the least recently used task that nothing runs on', async (t) => {
  // 8 module-layers: two 4-row tasks fit, a third evicts the least recently used one.
  const { ex, done } = await start(8)
  t.teardown(() => ex.shutdown())
  await done(ex.enqueue(request(1, 4)))
  await done(ex.enqueue(request(2, 4)))
  await done(ex.enqueue(request(1, false))) // task 1 is now the more recently used
  await done(ex.enqueue(request(3, 4))) // evicts task 2
  t.equal(ex.stats().loraTasksCached, 2)
  const miss = (await done(ex.enqueue(request(2, false))))[0]
  t.equal(miss?.error, MISS(2), 'the evicted task must be re-sent with weights')
  t.same(tokensOf(await done(ex.enqueue(request(1, false)))), predicted(1, 4), 'task 1 stayed')
  t.same(tokensOf(await done(ex.enqueue(request(3, false)))), predicted(3, 4), 'task 3 stayed')
})

t.test('tasks in use are not evicted: the cache-full error when nothing can go', async (t) => {
  const { ex, done } = await start(8)
  t.teardown(() => ex.shutdown())
  const long = ex.enqueue(request(1, 8, 10000)) // holds all 8 rows while it runs
  const full = (await done(ex.enqueue(request(2, 4))))[0]
  t.equal(full?.errorKind, 'lora_cache_full')
  t.match(full?.error, /PEFT Cache is full. Could not store taskId=2.*no done tasks to evict/)
  const tooBig = (await done(ex.enqueue(request(3, 9))))[0]
  t.equal(tooBig?.errorKind, 'lora_cache_full', 'a task larger than the whole cache')
  ex.cancel(long)
  t.equal((await done(long)).at(-1)?.finishReason, 'cancelled')
  // Once task 1 is done it can be evicted.
  t.same(tokensOf(await done(ex.enqueue(request(2, 4)))), predicted(2, 4))
})

t.test('eviction and reload under 50 concurrent requests over 20 adapters', async (t) => {
  // Room for 6 two-row tasks; each request sends its weights only when told the task is missing.
  const { ex, done } = await start(12, 4)
  t.teardown(() => ex.shutdown())
  let misses = 0
  const run = async (k: number) => {
    const task = (k % 20) + 1
    let list = await done(ex.enqueue(request(task, false, 3)))
    if (list.at(-1)?.errorKind === 'lora_not_cached') {
      misses++
      list = await done(ex.enqueue(request(task, 2, 3)))
    }
    return { task, list }
  }
  const results = await Promise.all(Array.from({ length: 50 }, (_, k) => run(k)))
  for (const { task, list } of results) {
    t.equal(list.at(-1)?.finishReason, 'length', `task ${task} finished`)
    t.same(tokensOf(list), predicted(task, 3))
  }
  t.ok(misses >= 20, `every task missed at least once (${misses} misses)`)
  t.ok(ex.stats().loraCacheModuleLayersUsed <= 12)
})

t.test('LoRA tensors are checked at enqueue: dtype and every dimension in the message', async (t) => {
  const { ex } = await start(64)
  t.teardown(() => ex.shutdown())
  const lora = (tensorsOverride: Partial<NativeLoraWeights>): NativeRequest => ({
    ...request(null, false),
    lora: { taskId: 1, tensors: { ...tensors(2), ...tensorsOverride } },
  })
  const cases: [NativeRequest, RegExp][] = [
    [
      lora({ configShape: [3, 3], config: new Int32Array(9) }),
      /lora\.config: expected int32 \[2, 3\].*got int32 \[3, 3\]/,
    ],
    [lora({ configShape: [2, 5], config: new Int32Array(10) }), /expected int32 \[2, 3\] \(or \[2, 4\] with is_dora\)/],
    [
      lora({ weights: new Uint16Array(31) }),
      /lora\.tensors\.weights: expected Uint16Array float16 \[2, 16\] \(32 values\), got \[31\]/,
    ],
    [lora({ weights: new Float32Array(32) }), /expected Uint16Array float16 \[2, 16\].*got Float32Array \[32\]/],
    [
      lora({ dtype: 'int8' as NativeLoraWeights['dtype'] }),
      /lora\.tensors\.dtype: expected 'float16', 'bfloat16' or 'float32'/,
    ],
    [lora({ config: Int32Array.of(1, 0, 0, 1, 1, 2) }), /lora\.config\[0\]: rank \(adapter size\) must be > 0; got 0/],
    [lora({ config: Int32Array.of(99, 0, 2, 1, 1, 2) }), /lora\.config\[0\]: module id must be in \[0, 21\]; got 99/],
    [lora({ config: Int32Array.of(1, -1, 2, 1, 1, 2) }), /lora\.config\[0\]: layer must be >= 0; got -1/],
    [lora({ weightsShape: [2, 0] }), /weightsShape\[1\]: expected an integer >= 1/],
    [{ ...request(null, false), lora: { taskId: -1 } }, /lora\.taskId\b.*got -1|taskId: expected an integer in \[0/],
  ]
  for (const [req, message] of cases)
    t.throws(() => ex.enqueue(req), { code: 'native_error', message }, String(message))
  // float32 and bfloat16 weights are accepted in their own arrays.
  t.doesNotThrow(() => ex.enqueue({ ...request(null, false), lora: { taskId: 2, tensors: tensors(2, 'float32') } }))
  t.doesNotThrow(() => ex.enqueue({ ...request(null, false), lora: { taskId: 3, tensors: tensors(2, 'bfloat16') } }))
})
