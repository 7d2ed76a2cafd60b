import t from 'tap'
import { LoomError } from '../../src/errors/index.ts'
import { fakeGreedy } from './fake-step-runner.ts'
import { collect, finishOf, idsOf, localAdapter, makeRequest, sleep, startEngine } from './engine-fixtures.ts'

t.test('close() drains running and queued requests, refuses new work, then closes the runner', async (t) => {
  const { engine, runner } = await startEngine({ stepDelayMs: 1 }, { maxBatchSize: 1 })
  const a = collect(engine.submit(makeRequest({ maxNewTokens: 5 })))
  const b = collect(engine.submit(makeRequest({ maxNewTokens: 5 })))
  const closed = engine.close()
  t.equal(engine.close(), closed, 'idempotent: same promise')
  t.throws(() => engine.submit(makeRequest()), { code: 'server_closing' })
  await t.rejects(engine.loadAdapter(localAdapter('x')), { code: 'server_closing' })
  t.equal(runner.closeCalls, 0)
  const [ea, eb] = await Promise.all([a, b])
  t.equal(finishOf(ea).reason, 'length')
  t.equal(finishOf(eb).reason, 'length')
  await closed
  t.equal(runner.closeCalls, 1)
  await engine.close()
  t.equal(runner.closeCalls, 1)
})

t.test('destroy() fails every pending iterable with the error, closes the runner, is idempotent', async (t) => {
  const { engine, runner } = await startEngine({ stepDelayMs: 2 }, { maxBatchSize: 1 })
  const running = collect(engine.submit(makeRequest({ maxNewTokens: 1000 })))
  const queued = collect(engine.submit(makeRequest({ maxNewTokens: 1000 })))
  await sleep(10)
  const boom = new Error('operator pulled the plug')
  engine.destroy(boom)
  engine.destroy(new Error('second'))
  await t.rejects(running, boom)
  await t.rejects(queued, boom)
  t.equal(engine.stats().kvBlocksFree, engine.stats().kvBlocksTotal)
  t.throws(() => engine.submit(makeRequest()), { code: 'server_closing' })
  await engine.close()
  t.equal(runner.closeCalls, 1)
})

t.test('destroy() without an error uses server_closing', async (t) => {
  const { engine } = await startEngine({ stepDelayMs: 2 })
  const running = collect(engine.submit(makeRequest({ maxNewTokens: 1000 })))
  await sleep(5)
  engine.destroy()
  const err = await running.then(
    () => null,
    (e: unknown) => e,
  )
  t.ok(err instanceof LoomError && err.code === 'server_closing')
})

t.test('a failing step fails only its rows; the loop keeps serving', async (t) => {
  let failed = false
  const { engine } = await startEngine({
    stepDelayMs: 1,
    beforeStep: (batch) => {
      if (!failed && batch.rows.some((r) => r.tokens[0] === 13)) {
        failed = true
        throw new Error('CUDA error: an illegal memory access')
      }
    },
  })
  // Settled into a value at once: it may reject before the test looks at it.
  const before = collect(engine.submit(makeRequest({ inputIds: [1, 2], maxNewTokens: 30 }))).then(
    (events) => finishOf(events).reason as string,
    (err: unknown) => (err as LoomError).code as string,
  )
  await sleep(10)
  await t.rejects(collect(engine.submit(makeRequest({ inputIds: [13, 14], maxNewTokens: 3 }))), {
    code: 'generation_error',
    message: /illegal memory access/,
  })
  const after = await collect(engine.submit(makeRequest({ inputIds: [5, 6], maxNewTokens: 3 })))
  t.same(idsOf(after), fakeGreedy([5, 6], -1, 64, 3))
  // The first request shared the failed step, so it failed too (the step is the unit of failure).
  t.equal(await before, 'generation_error')
  t.equal(engine.stats().kvBlocksFree, engine.stats().kvBlocksTotal)
  await engine.close()
})

t.test('start() is idempotent and loads once', async (t) => {
  const { engine, runner } = await startEngine()
  await engine.start()
  t.equal(runner.loadCalls, 1)
  await engine.close()
})
