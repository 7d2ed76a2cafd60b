import t from 'tap'
import { LoomError } from '../../src/errors/index.ts'
import { BatchingEngine } from '../../src/engine/batching-engine.ts'
import { FakeStepRunner } from './fake-step-runner.ts'
import { collect, makeRequest, readFakeLora, silentLogger, startEngine } from './engine-fixtures.ts'

t.test('submit beyond maxConcurrentRequests throws overloaded synchronously (queued + running count)', async (t) => {
  const { engine } = await startEngine({}, { maxConcurrentRequests: 3, maxBatchSize: 1 })
  const accepted = [0, 1, 2].map(() => engine.submit(makeRequest({ maxNewTokens: 3 })))
  let thrown: unknown
  try {
    engine.submit(makeRequest())
  } catch (err) {
    thrown = err
  }
  t.ok(thrown instanceof LoomError)
  t.equal((thrown as LoomError).code, 'overloaded')
  t.equal((thrown as LoomError).status, 429)
  t.match(
    (thrown as LoomError).message,
    /3 sequences are queued or running \(max_concurrent_requests is 3; each choice of a request with n > 1 or a prompt list counts as one\)/,
  )
  t.same(engine.stats().queuedRequests + engine.stats().runningRequests, 3)
  await Promise.all(accepted.map(collect))
  t.doesNotThrow(() => engine.submit(makeRequest({ maxNewTokens: 1 })), 'capacity returns once requests end')
  await engine.close()
})

t.test('submit before start is backend_not_ready; bad prompts are refused', async (t) => {
  const engine = new BatchingEngine({
    runner: new FakeStepRunner({ maxContextLength: 16 }),
    limits: { maxBatchSize: 4, maxBatchPrefillTokens: 64, maxConcurrentRequests: 4 },
    readAdapter: readFakeLora,
    logger: silentLogger,
    name: 'fake',
  })
  t.throws(() => engine.submit(makeRequest()), { code: 'backend_not_ready' })
  t.throws(() => engine.capabilities(), { code: 'backend_not_ready' })
  await engine.start()
  t.throws(() => engine.submit(makeRequest({ inputIds: [] })), { code: 'bad_request' })
  t.throws(() => engine.submit(makeRequest({ inputIds: Array.from({ length: 16 }, () => 1) })), { code: 'bad_request' })
  t.throws(() => engine.submit(makeRequest({ inputIds: [1, 999] })), { code: 'bad_request' })
  t.equal(engine.stats().queuedRequests, 0, 'refused requests hold nothing')
  const caps = engine.capabilities()
  t.equal(caps.name, 'fake')
  t.equal(caps.maxContextLength, 16)
  t.equal(caps.vocabSize, 64)
  t.equal(caps.medusa, true, 'Medusa heads load into adapter slots')
  t.equal(caps.structuredOutput, true)
  t.equal(caps.maxLoraRank, 64)
  t.same(caps.loraTargetModules, ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'])
  t.equal(caps.modelShape.hidden_size, 16)
  await engine.close()
})
