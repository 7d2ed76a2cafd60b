import t from 'tap'
import { AdapterQueues } from '../../src/engine/adapter-queues.ts'
import { collect, localAdapter, makeRequest, startEngine } from './engine-fixtures.ts'

t.test('AdapterQueues: round-robin across keys, FIFO within a key', async (t) => {
  const q = new AdapterQueues<string>()
  for (let i = 0; i < 4; i++) q.push('a', `a${i}`)
  q.push('b', 'b0')
  q.push('b', 'b1')
  q.push('c', 'c0')
  const order: string[] = []
  while (q.size > 0) order.push(q.shift()!)
  t.same(order, ['a0', 'b0', 'c0', 'a1', 'b1', 'a2', 'a3'])
})

t.test('AdapterQueues: remove keeps the rotation consistent', async (t) => {
  const q = new AdapterQueues<string>()
  q.push('a', 'a0')
  q.push('b', 'b0')
  q.push('c', 'c0')
  t.equal(q.shift(), 'a0')
  t.ok(q.remove('b', 'b0'))
  t.notOk(q.remove('b', 'b0'))
  q.push('a', 'a1')
  t.same([q.shift(), q.shift(), q.shift()], ['c0', 'a1', undefined])
})

t.test('a flood on one adapter does not starve a request on another', async (t) => {
  const { engine, runner } = await startEngine({}, { maxBatchSize: 2 })
  const busy = await engine.loadAdapter(localAdapter('busy'))
  const other = await engine.loadAdapter(localAdapter('other'))
  const flood = Array.from({ length: 20 }, (_, i) =>
    collect(engine.submit(makeRequest({ inputIds: [i + 1, 2, 3], maxNewTokens: 4, adapter: busy }))),
  )
  const lone = engine.submit(makeRequest({ inputIds: [9, 9], maxNewTokens: 4, adapter: other }))
  const loneDone = collect(lone)
  await Promise.all([...flood, loneDone])
  const otherSlot = runner.batches.flat().find((r) => r.tokens.length === 2 && r.tokens[0] === 9)!.loraSlot
  const firstStep = runner.batches.findIndex((rows) => rows.some((r) => r.loraSlot === otherSlot))
  let lastBusyStart = -1
  runner.batches.forEach((rows, i) => {
    if (rows.some((r) => r.loraSlot !== otherSlot && r.cacheLen === 0)) lastBusyStart = i
  })
  t.ok(firstStep >= 0 && firstStep < 10, `the other adapter's request ran at step ${firstStep}, early`)
  t.ok(firstStep < lastBusyStart, 'and before the flood had been admitted')
  await engine.close()
})

t.test('base-model requests get their own queue', async (t) => {
  const { engine, runner } = await startEngine({}, { maxBatchSize: 1 })
  const busy = await engine.loadAdapter(localAdapter('busy'))
  const flood = Array.from({ length: 6 }, () => collect(engine.submit(makeRequest({ maxNewTokens: 2, adapter: busy }))))
  const base = collect(engine.submit(makeRequest({ maxNewTokens: 2 })))
  await Promise.all([...flood, base])
  const admissions = runner.batches
    .flat()
    .filter((r) => r.cacheLen === 0)
    .map((r) => r.loraSlot)
  t.equal(admissions.indexOf(-1), 1, 'the base request is admitted second, not seventh')
  await engine.close()
})
