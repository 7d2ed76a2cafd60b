import t from 'tap'
import type { LoraWeights } from '../../src/contracts/step-runner.ts'
import { adapterSize } from '../../src/engine/adapter-registry.ts'
import { fakeGreedy } from './fake-step-runner.ts'
import { collect, fakeLora, finishOf, idsOf, localAdapter, makeRequest, sleep, startEngine } from './engine-fixtures.ts'

const V = 64

t.test('concurrent loads of one key share one read and one slot', async (t) => {
  let reads = 0
  const { engine, runner } = await startEngine({}, {}, async (adapter) => {
    reads++
    await sleep(5)
    return fakeLora(adapter.resolved.id, 16)
  })
  const [a, b] = await Promise.all([engine.loadAdapter(localAdapter('x')), engine.loadAdapter(localAdapter('x'))])
  t.equal(a, b, 'same handle object')
  t.same(a, { key: 'local:x@r1', id: 'x', kind: 'lora', size: 16 })
  t.equal(reads, 1)
  t.equal(await engine.loadAdapter(localAdapter('x')), a, 'loading again later returns the same handle')
  const c = await engine.loadAdapter(localAdapter('x', 'r2'))
  t.equal(c.key, 'local:x@r2', 'another revision is another adapter')
  t.equal(engine.stats().loadedAdapters, 2)
  t.equal(runner.loadedWeights.filter((w) => w !== null).length, 2)
  t.same(runner.violations, [], 'adapter loads never overlapped a step')
  await engine.close()
})

t.test('rows carry the adapter slot; adapters change the output; mixed batches work', async (t) => {
  const { engine, runner } = await startEngine()
  const x = await engine.loadAdapter(localAdapter('x'))
  const y = await engine.loadAdapter(localAdapter('y'))
  const prompt = [3, 3, 3]
  const [base, withX, withY] = await Promise.all(
    [null, x, y].map((adapter) => collect(engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: 6, adapter })))),
  )
  t.same(
    runner.batches[0]!.map((r) => r.loraSlot),
    [-1, 0, 1],
    'one step, three adapters',
  )
  t.same(idsOf(base!), fakeGreedy(prompt, -1, V, 6))
  t.same(idsOf(withX!), fakeGreedy(prompt, 0, V, 6))
  t.same(idsOf(withY!), fakeGreedy(prompt, 1, V, 6))
  t.notSame(idsOf(withX!), idsOf(base!))
  await engine.close()
})

t.test('rows of one adapter are side by side in a step, each adapter in admission order', async (t) => {
  const { engine, runner } = await startEngine()
  const x = await engine.loadAdapter(localAdapter('x'))
  const y = await engine.loadAdapter(localAdapter('y'))
  // Submitted interleaved: x, base, y, x, base, y.
  const adapters = [x, null, y, x, null, y]
  const prompts = adapters.map((_, i) => [3, i + 1])
  const results = await Promise.all(
    adapters.map((adapter, i) =>
      collect(engine.submit(makeRequest({ inputIds: prompts[i]!, maxNewTokens: 4, adapter }))),
    ),
  )
  for (const [s, batch] of runner.batches.entries()) {
    const slots = batch.map((r) => r.loraSlot)
    t.same(
      slots,
      [...slots].sort((a, b) => a - b),
      `step ${s}: rows grouped by adapter (${slots.join(' ')})`,
    )
  }
  t.same(
    runner.batches[0]!.map((r) => [r.loraSlot, r.tokens[1]]),
    [
      [-1, 2],
      [-1, 5],
      [0, 1],
      [0, 4],
      [1, 3],
      [1, 6],
    ],
    'within an adapter, admission order',
  )
  results.forEach((events, i) => {
    const slot = adapters[i] === null ? -1 : adapters[i] === x ? 0 : 1
    t.same(idsOf(events), fakeGreedy(prompts[i]!, slot, V, 4), `request ${i}: its own output`)
  })
  await engine.close()
})

t.test('unload waits for the requests holding the adapter; the handle is then invalid', async (t) => {
  const { engine, runner } = await startEngine({ stepDelayMs: 2 })
  const x = await engine.loadAdapter(localAdapter('x'))
  const running = collect(engine.submit(makeRequest({ maxNewTokens: 10, adapter: x })))
  await sleep(5)
  let unloaded = false
  const unload = engine.unloadAdapter(x).then(() => {
    unloaded = true
  })
  t.throws(() => engine.submit(makeRequest({ adapter: x })), { code: 'internal_error' }, 'no new users after unload')
  await sleep(5)
  t.equal(unloaded, false, 'still in use')
  t.same(runner.unloadedSlots, [])
  t.equal(finishOf(await running).reason, 'length')
  await unload
  t.same(runner.unloadedSlots, [0])
  t.equal(engine.stats().loadedAdapters, 0)
  await engine.unloadAdapter(x)
  t.same(runner.unloadedSlots, [0], 'unload is idempotent')
  const again = await engine.loadAdapter(localAdapter('x'))
  t.not(again, x, 'a fresh load after unload')
  t.same(runner.violations, [])
  await engine.close()
})

t.test('an unused adapter is unloaded at once; a reload during a deferred unload revives it', async (t) => {
  const { engine, runner } = await startEngine({ stepDelayMs: 2 })
  const x = await engine.loadAdapter(localAdapter('x'))
  await engine.unloadAdapter(x)
  t.same(runner.unloadedSlots, [0])

  const y = await engine.loadAdapter(localAdapter('y'))
  const running = collect(engine.submit(makeRequest({ maxNewTokens: 5, adapter: y })))
  const unload = engine.unloadAdapter(y)
  const revived = await engine.loadAdapter(localAdapter('y'))
  t.equal(revived, y)
  await unload
  await running
  t.same(runner.unloadedSlots, [0], 'y was never unloaded')
  t.equal(engine.stats().loadedAdapters, 1)
  await engine.close()
})

t.test('load failures are adapter_load_failed (or the runner’s own code) and can be retried', async (t) => {
  let fail = true
  const { engine } = await startEngine({ adapterSlots: 1 }, {}, async (adapter) => {
    if (fail) throw new Error('bad safetensors header')
    return fakeLora(adapter.resolved.id)
  })
  await t.rejects(engine.loadAdapter(localAdapter('x')), {
    code: 'adapter_load_failed',
    message: 'Loading adapter `x` failed: bad safetensors header',
  })
  fail = false
  t.same(await engine.loadAdapter(localAdapter('x')), { key: 'local:x@r1', id: 'x', kind: 'lora', size: 8 })
  await engine.close()
})

t.test('adapterSize: max LoRA rank over layers and modules', async (t) => {
  const w: LoraWeights = {
    kind: 'lora',
    key: 'k',
    layers: [
      { q_proj: { rank: 8, scale: 1, a: new Float32Array(0), b: new Float32Array(0) } },
      { v_proj: { rank: 32, scale: 1, a: new Float32Array(0), b: new Float32Array(0) } },
    ],
  }
  t.equal(adapterSize(w), 32)
  t.equal(adapterSize({ kind: 'medusa', key: 'm', numHeads: 4, numLayers: 1, heads: [] }), 4)
})
