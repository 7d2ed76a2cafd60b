import t from 'tap'
import { collect, finishOf, makeRequest, sleep, startEngine } from './engine-fixtures.ts'

t.test('aborting the signal frees the blocks at once and ends the stream with cancelled', async (t) => {
  const { engine, runner } = await startEngine({ stepDelayMs: 5, kvBlockSize: 4 })
  const controller = new AbortController()
  const other = collect(engine.submit(makeRequest({ inputIds: [1, 2, 3], maxNewTokens: 12 })))
  const events = engine.submit(
    makeRequest({ inputIds: [1, 2, 3, 4, 5, 6, 7, 8, 9], maxNewTokens: 100, signal: controller.signal }),
  )
  const seen: string[] = []
  const reader = (async () => {
    for await (const event of events) seen.push(event.type)
  })()
  await sleep(25)
  const before = engine.stats().kvBlocksFree
  controller.abort()
  const after = engine.stats().kvBlocksFree
  t.ok(after >= before + 3, `blocks freed synchronously (${before} → ${after}) even with a step in flight`)
  await reader
  t.equal(seen[seen.length - 1], 'finish')
  const otherEvents = await other
  t.equal(finishOf(otherEvents).reason, 'length', 'the neighbour keeps going')
  t.same(runner.violations, [])
  t.equal(engine.stats().kvBlocksFree, engine.stats().kvBlocksTotal)
  await engine.close()
})

t.test('the cancelled finish carries the reason', async (t) => {
  const { engine } = await startEngine({ stepDelayMs: 2 })
  const controller = new AbortController()
  const done = collect(engine.submit(makeRequest({ maxNewTokens: 1000, signal: controller.signal })))
  await sleep(10)
  controller.abort()
  const events = await done
  t.equal(finishOf(events).reason, 'cancelled')
  await engine.close()
})

t.test('breaking out of the iterable cancels the request and frees its blocks', async (t) => {
  const { engine, runner } = await startEngine({ stepDelayMs: 1 })
  let count = 0
  for await (const event of engine.submit(makeRequest({ maxNewTokens: 1000 }))) {
    if (event.type === 'tokens') count++
    if (count === 3) break
  }
  t.equal(engine.stats().runningRequests, 0)
  t.equal(engine.stats().kvBlocksFree, engine.stats().kvBlocksTotal, 'freed at once')
  const steps = runner.batches.length
  await sleep(10)
  t.ok(runner.batches.length <= steps + 1, 'the sequence leaves at the next step boundary')
  t.ok(runner.batches.slice(steps + 1).every((rows) => rows.length === 0))
  await engine.close()
})

t.test('an already-aborted signal finishes at once; a queued request can be cancelled', async (t) => {
  const { engine } = await startEngine({ stepDelayMs: 2 }, { maxBatchSize: 1 })
  const events = await collect(engine.submit(makeRequest({ signal: AbortSignal.abort() })))
  t.same(
    events.map((e) => e.type),
    ['finish'],
  )
  t.equal(finishOf(events).reason, 'cancelled')

  const running = collect(engine.submit(makeRequest({ maxNewTokens: 5 })))
  const controller = new AbortController()
  const queued = collect(engine.submit(makeRequest({ maxNewTokens: 5, signal: controller.signal })))
  t.equal(engine.stats().queuedRequests + engine.stats().runningRequests, 2)
  controller.abort()
  t.equal(engine.stats().queuedRequests + engine.stats().runningRequests, 1)
  t.equal(finishOf(await queued).reason, 'cancelled')
  t.equal(finishOf(await running).reason, 'length')
  await engine.close()
})
