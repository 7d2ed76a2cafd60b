import t from 'tap'
import type { AdapterHandle, LocalAdapter } from '../../src/contracts/adapter.ts'
import type { ReadAdapter } from '../../src/engine/adapter-registry.ts'
import { weightBytes } from '../../src/engine/host-weight-cache.ts'
import { adapterSalt, fakeGreedy } from './fake-step-runner.ts'
import {
  collect,
  fakeLora,
  finishOf,
  idsOf,
  localAdapter,
  localMedusa,
  makeRequest,
  sleep,
  startEngine,
} from './engine-fixtures.ts'

const V = 64
const KEY_SALT = { saltByAdapterKey: true }

/** A `readAdapter` that counts its calls per adapter id. */
function countingReader(): { read: ReadAdapter; reads: Map<string, number>; total: () => number } {
  const reads = new Map<string, number>()
  const read: ReadAdapter = async (adapter: LocalAdapter) => {
    reads.set(adapter.resolved.id, (reads.get(adapter.resolved.id) ?? 0) + 1)
    return fakeLora(`local:${adapter.resolved.id}@${adapter.resolved.revision}`)
  }
  return { read, reads, total: () => [...reads.values()].reduce((a, b) => a + b, 0) }
}

const expected = (prompt: number[], key: string, n: number): number[] => fakeGreedy(prompt, adapterSalt(key), V, n)

t.test('2 slots, 5 adapters round-robin: every request gets its own adapter’s tokens', async (t) => {
  const reader = countingReader()
  const { engine, runner } = await startEngine(
    { ...KEY_SALT, adapterSlots: 2, stepDelayMs: 0 },
    { maxBatchSize: 3 },
    reader.read,
  )
  const names = ['a', 'b', 'c', 'd', 'e']
  const handles: AdapterHandle[] = []
  for (const name of names) handles.push(await engine.loadAdapter(localAdapter(name)))
  t.equal(engine.stats().loadedAdapters, 2, 'only two resident')
  const jobs = Array.from({ length: 40 }, (_, i) => {
    const handle = handles[i % names.length]!
    const prompt = [1 + (i % 7), 2 + (i % 5), 3]
    const maxNewTokens = 3 + (i % 4)
    return collect(engine.submit(makeRequest({ inputIds: prompt, maxNewTokens, adapter: handle }))).then((events) => ({
      events,
      prompt,
      maxNewTokens,
      key: handle.key,
    }))
  })
  let maxResident = 0
  const sampler = setInterval(() => {
    maxResident = Math.max(maxResident, runner.loadedWeights.filter((w) => w !== null).length)
  }, 1)
  const results = await Promise.all(jobs)
  clearInterval(sampler)
  for (const [i, r] of results.entries()) {
    t.same(idsOf(r.events), expected(r.prompt, r.key, r.maxNewTokens), `request ${i} (${r.key})`)
    t.equal(finishOf(r.events).reason, 'length')
  }
  const stats = engine.adapterStats()!
  t.ok(stats.deviceEvictions >= 3, `evictions happened (${stats.deviceEvictions})`)
  t.ok(stats.deviceLoads > names.length, `adapters were reloaded (${stats.deviceLoads} loads)`)
  t.equal(reader.total(), names.length, 'every reload came from the host cache')
  t.equal(stats.hostCacheHits, stats.deviceLoads - names.length)
  t.ok(maxResident <= 2)
  t.same(runner.violations, [], 'no row used a freed or swapped slot; no load overlapped a step')
  t.equal(stats.slotWaiters, 0)
  await engine.close()
})

t.test('the same tokens as each adapter alone, request for request', async (t) => {
  // Reference run: one adapter at a time, plenty of slots.
  const alone = await startEngine(KEY_SALT)
  const solo: number[][] = []
  for (const name of ['p', 'q', 'r']) {
    const h = await alone.engine.loadAdapter(localAdapter(name))
    solo.push(
      idsOf(await collect(alone.engine.submit(makeRequest({ inputIds: [5, 6, 7], maxNewTokens: 6, adapter: h })))),
    )
  }
  await alone.engine.close()

  const { engine, runner } = await startEngine({ ...KEY_SALT, adapterSlots: 1 })
  const hs = [
    await engine.loadAdapter(localAdapter('p')),
    await engine.loadAdapter(localAdapter('q')),
    await engine.loadAdapter(localAdapter('r')),
  ]
  const mixed = await Promise.all(
    [0, 1, 2, 0, 1, 2].map((i) =>
      collect(engine.submit(makeRequest({ inputIds: [5, 6, 7], maxNewTokens: 6, adapter: hs[i]! }))),
    ),
  )
  t.same(mixed.map(idsOf), [...solo, ...solo])
  t.same(runner.violations, [])
  await engine.close()
})

t.test('an adapter evicted before its request is scheduled is reloaded from the host cache', async (t) => {
  const reader = countingReader()
  const { engine, runner } = await startEngine({ ...KEY_SALT, adapterSlots: 1 }, {}, reader.read)
  const x = await engine.loadAdapter(localAdapter('x'))
  const y = await engine.loadAdapter(localAdapter('y'))
  t.same(runner.unloadedSlots, [0], 'x was evicted to make room for y')
  t.equal(engine.adapterStats()!.deviceEvictions, 1)
  const events = await collect(engine.submit(makeRequest({ inputIds: [9, 9], maxNewTokens: 5, adapter: x })))
  t.same(idsOf(events), expected([9, 9], x.key, 5))
  t.same(Object.fromEntries(reader.reads), { x: 1, y: 1 }, 'no second read: host-cache hit')
  const stats = engine.adapterStats()!
  t.equal(stats.hostCacheHits, 1)
  t.equal(stats.deviceEvictions, 2, 'y made room for x again')
  t.equal(finishOf(events).queueMs >= 0, true)
  const again = await collect(engine.submit(makeRequest({ inputIds: [9, 9], maxNewTokens: 5, adapter: y })))
  t.same(idsOf(again), expected([9, 9], y.key, 5))
  t.same(runner.violations, [])
  await engine.close()
})

t.test('host cache LRU stays within hostCacheBytes; a miss reads the files again', async (t) => {
  const reader = countingReader()
  const bytes = weightBytes(fakeLora('k'))
  const limit = Math.floor(bytes * 2.5)
  const { engine } = await startEngine({ ...KEY_SALT, adapterSlots: 1 }, {}, reader.read, { hostCacheBytes: limit })
  const [a, , c] = [
    await engine.loadAdapter(localAdapter('a')),
    await engine.loadAdapter(localAdapter('b')),
    await engine.loadAdapter(localAdapter('c')),
  ]
  let stats = engine.adapterStats()!
  t.equal(stats.hostCacheEntries, 2, 'a was dropped from host memory')
  t.equal(stats.hostCacheBytes, 2 * bytes)
  t.ok(stats.hostCacheBytes <= limit)
  t.equal(stats.hostCacheEvictions, 1)

  const ea = await collect(engine.submit(makeRequest({ inputIds: [4, 4], maxNewTokens: 4, adapter: a })))
  t.same(idsOf(ea), expected([4, 4], a.key, 4))
  t.equal(reader.reads.get('a'), 2, 'a missed the host cache: read again')
  const ec = await collect(engine.submit(makeRequest({ inputIds: [4, 4], maxNewTokens: 4, adapter: c })))
  t.same(idsOf(ec), expected([4, 4], c.key, 4))
  t.equal(reader.reads.get('c'), 1, 'c was still in host memory')
  stats = engine.adapterStats()!
  t.ok(stats.hostCacheBytes <= limit)
  t.equal(stats.hostCacheLimitBytes, limit)
  t.equal(stats.reads, 4)
  await engine.close()
})

t.test('hostCacheBytes 0 caches nothing; every reload reads', async (t) => {
  const reader = countingReader()
  const { engine } = await startEngine({ ...KEY_SALT, adapterSlots: 1 }, {}, reader.read, { hostCacheBytes: 0 })
  const x = await engine.loadAdapter(localAdapter('x'))
  await engine.loadAdapter(localAdapter('y'))
  await collect(engine.submit(makeRequest({ adapter: x })))
  t.equal(reader.reads.get('x'), 2)
  t.equal(engine.adapterStats()!.hostCacheBytes, 0)
  await engine.close()
})

t.test('all slots pinned: a load waits, then proceeds when a pin drops; never evicts mid-request', async (t) => {
  const { engine, runner } = await startEngine({ ...KEY_SALT, adapterSlots: 1, stepDelayMs: 2 })
  const x = await engine.loadAdapter(localAdapter('x'))
  const running = collect(engine.submit(makeRequest({ inputIds: [3, 1], maxNewTokens: 12, adapter: x })))
  await sleep(5)
  let yLoaded = false
  const yLoad = engine.loadAdapter(localAdapter('y')).then((h) => {
    yLoaded = true
    return h
  })
  await sleep(10)
  t.equal(yLoaded, false, 'y waits while x is pinned')
  t.same(runner.unloadedSlots, [], 'x is not evicted under a running request')
  t.equal(engine.adapterStats()!.slotWaiters, 1)
  const events = await running
  t.same(idsOf(events), expected([3, 1], x.key, 12))
  const y = await yLoad
  t.same(runner.unloadedSlots, [0], 'x evicted once its request ended')
  const ey = await collect(engine.submit(makeRequest({ inputIds: [3, 1], maxNewTokens: 4, adapter: y })))
  t.same(idsOf(ey), expected([3, 1], y.key, 4))
  t.same(runner.violations, [])
  await engine.close()
})

t.test('a load waiting longer than adapterLoadTimeoutMs fails with adapter_slots_full', async (t) => {
  const { engine, runner } = await startEngine({ ...KEY_SALT, adapterSlots: 1, stepDelayMs: 2 }, {}, undefined, {
    adapterLoadTimeoutMs: 15,
  })
  const x = await engine.loadAdapter(localAdapter('x'))
  const running = collect(engine.submit(makeRequest({ maxNewTokens: 30, adapter: x })))
  await sleep(2)
  await t.rejects(engine.loadAdapter(localAdapter('y')), {
    code: 'adapter_slots_full',
    message: 'All 1 adapter slots are in use by running requests',
  })
  t.equal(finishOf(await running).reason, 'length', 'the running request is unaffected')
  const y = await engine.loadAdapter(localAdapter('y'))
  t.equal(y.key, 'local:y@r1', 'a retry succeeds once the slot is free')
  t.same(runner.violations, [])
  await engine.close()
})

t.test('a request waiting for its adapter does not hold up others; its reload times out alone', async (t) => {
  const { engine } = await startEngine({ ...KEY_SALT, adapterSlots: 1, stepDelayMs: 2 }, {}, undefined, {
    adapterLoadTimeoutMs: 40,
  })
  const x = await engine.loadAdapter(localAdapter('x'))
  const y = await engine.loadAdapter(localAdapter('y')) // x evicted
  const order: string[] = []
  const track = (name: string, p: Promise<unknown>): Promise<unknown> =>
    p.then(
      () => order.push(name),
      (err: { code?: string }) => order.push(`${name}:${err.code}`),
    )
  // y is pinned by a long request; x's request waits for a slot; base requests flow meanwhile.
  const long = track('y', collect(engine.submit(makeRequest({ maxNewTokens: 60, adapter: y }))))
  await sleep(1)
  const waiting = track('x', collect(engine.submit(makeRequest({ maxNewTokens: 2, adapter: x }))))
  const base = track('base', collect(engine.submit(makeRequest({ maxNewTokens: 2 }))))
  await Promise.all([long, waiting, base])
  t.same(order, ['base', 'x:adapter_slots_full', 'y'])
  t.equal(engine.stats().queuedRequests, 0)
  // The handle is still good: the next request reloads x.
  const later = await collect(engine.submit(makeRequest({ inputIds: [2, 2], maxNewTokens: 3, adapter: x })))
  t.same(idsOf(later), expected([2, 2], x.key, 3))
  await engine.close()
})

t.test('a cancelled request abandons its adapter’s reload', async (t) => {
  const { engine, runner } = await startEngine({ ...KEY_SALT, adapterSlots: 1, stepDelayMs: 2 })
  const x = await engine.loadAdapter(localAdapter('x'))
  const y = await engine.loadAdapter(localAdapter('y'))
  const loadsBefore = runner.adapterLoads
  const running = collect(engine.submit(makeRequest({ maxNewTokens: 10, adapter: y })))
  const ac = new AbortController()
  const cancelled = collect(engine.submit(makeRequest({ adapter: x, signal: ac.signal })))
  await sleep(3)
  t.equal(engine.adapterStats()!.slotWaiters, 1)
  ac.abort()
  t.equal(finishOf(await cancelled).reason, 'cancelled')
  t.equal(engine.adapterStats()!.slotWaiters, 0, 'the wait is dropped')
  await running
  t.equal(runner.adapterLoads, loadsBefore, 'x was never reloaded')
  t.same(runner.unloadedSlots, [0], 'y stays resident')
  await engine.close()
})

t.test('a failed reload fails the requests waiting for it, not others', async (t) => {
  let broken = false
  const { engine } = await startEngine(
    { ...KEY_SALT, adapterSlots: 1 },
    {},
    async (adapter) => {
      if (broken && adapter.resolved.id === 'x') throw new Error('file vanished from the cache')
      return fakeLora(`local:${adapter.resolved.id}@r1`)
    },
    { hostCacheBytes: 0 },
  )
  const x = await engine.loadAdapter(localAdapter('x'))
  const y = await engine.loadAdapter(localAdapter('y'))
  broken = true
  const [fx, fy] = await Promise.allSettled([
    collect(engine.submit(makeRequest({ adapter: x }))),
    collect(engine.submit(makeRequest({ adapter: y }))),
  ])
  t.match(fx, { status: 'rejected', reason: { code: 'adapter_load_failed', message: /file vanished/ } })
  t.equal(fy.status, 'fulfilled')
  broken = false
  const again = await collect(engine.submit(makeRequest({ inputIds: [7], maxNewTokens: 2, adapter: x })))
  t.same(idsOf(again), expected([7], x.key, 2), 'the handle still works once reading works')
  await engine.close()
})

t.test('explicit unload forgets the adapter, its slot and its host copy', async (t) => {
  const reader = countingReader()
  const { engine, runner } = await startEngine({ ...KEY_SALT, adapterSlots: 1 }, {}, reader.read)
  const x = await engine.loadAdapter(localAdapter('x'))
  const y = await engine.loadAdapter(localAdapter('y')) // x evicted, still known
  await engine.unloadAdapter(x)
  t.throws(() => engine.submit(makeRequest({ adapter: x })), { code: 'internal_error' })
  let stats = engine.adapterStats()!
  t.equal(stats.known, 1)
  t.equal(stats.hostCacheEntries, 1)
  await engine.unloadAdapter(y)
  stats = engine.adapterStats()!
  t.same([stats.known, stats.deviceResident, stats.hostCacheEntries, stats.hostCacheBytes], [0, 0, 0, 0])
  t.same(runner.unloadedSlots, [0, 0])
  t.equal(engine.stats().loadedAdapters, 0)
  const x2 = await engine.loadAdapter(localAdapter('x'))
  t.equal(reader.reads.get('x'), 2, 'a forgotten adapter is read again')
  t.same(
    idsOf(await collect(engine.submit(makeRequest({ adapter: x2, maxNewTokens: 3 })))),
    expected([1, 2, 3, 4], x2.key, 3),
  )
  await engine.close()
})

t.test('adapter + speculator with a single slot can never run: adapter_slots_full at once', async (t) => {
  const { engine } = await startEngine({ adapterSlots: 1 })
  const x = await engine.loadAdapter(localAdapter('x'))
  const m = await engine.loadAdapter(localMedusa('m'))
  t.throws(() => engine.submit(makeRequest({ adapter: x, speculator: m })), { code: 'adapter_slots_full' })
  t.equal(engine.stats().queuedRequests, 0)
  await engine.close()
})

t.test('no adapter slots at all: loads fail with adapter_slots_full', async (t) => {
  const { engine } = await startEngine({ adapterSlots: 0 })
  await t.rejects(engine.loadAdapter(localAdapter('x')), { code: 'adapter_slots_full' })
  await engine.close()
})

t.test('destroy() fails loads waiting for a slot', async (t) => {
  const { engine } = await startEngine({ adapterSlots: 1, stepDelayMs: 2 })
  const x = await engine.loadAdapter(localAdapter('x'))
  const running = collect(engine.submit(makeRequest({ maxNewTokens: 1000, adapter: x }))).catch((e: unknown) => e)
  await sleep(3)
  const waiting = engine.loadAdapter(localAdapter('y'))
  await sleep(3)
  engine.destroy()
  await t.rejects(waiting, { code: 'server_closing' })
  await running
  await engine.close()
})
