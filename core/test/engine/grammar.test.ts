import t from 'tap'
import type { TokenConstraint } from '../../src/contracts/grammar.ts'
import { applyConstraintMask } from '../../src/engine/sampler/grammar-mask.ts'
import { collect, FakeConstraint, finishOf, GREEDY, idsOf, makeRequest, startEngine } from './engine-fixtures.ts'

const V = 64
const EOS = 63

t.test('greedy and sampled tokens honour the mask; eos is the only move once terminated', async (t) => {
  const { engine, constraints } = await startEngine()
  for (const sampling of [GREEDY, { ...GREEDY, temperature: 1.2, seed: 3n }]) {
    const constraint = new FakeConstraint(V, (id) => id % 2 === 0, 5)
    const events = await collect(
      engine.submit(
        makeRequest({
          inputIds: [1, 3, 5],
          maxNewTokens: 20,
          grammar: constraints.grammarFor(constraint),
          eosTokenIds: [EOS],
          sampling,
        }),
      ),
    )
    const ids = idsOf(events)
    t.same(ids.slice(0, 5), constraint.accepted, 'every generated token was accepted by the constraint')
    t.ok(
      ids.slice(0, 5).every((id) => id % 2 === 0),
      `only allowed tokens: ${ids}`,
    )
    t.equal(ids[5], EOS, 'eos (an odd token) forced after termination')
    t.equal(ids.length, 6)
    t.equal(finishOf(events).reason, 'eos_token')
  }
  await engine.close()
})

t.test('a terminated constraint without eos ends the sequence', async (t) => {
  const { engine, constraints } = await startEngine()
  const constraint = new FakeConstraint(V, () => true, 3)
  const events = await collect(
    engine.submit(makeRequest({ maxNewTokens: 20, grammar: constraints.grammarFor(constraint) })),
  )
  t.equal(idsOf(events).length, 3)
  t.equal(finishOf(events).reason, 'eos_token')
  await engine.close()
})

t.test('a constraint that allows nothing fails only that request', async (t) => {
  const { engine, constraints } = await startEngine()
  const constraint = new FakeConstraint(V, () => false, 3)
  const other = collect(engine.submit(makeRequest({ maxNewTokens: 4 })))
  await t.rejects(
    collect(engine.submit(makeRequest({ maxNewTokens: 5, grammar: constraints.grammarFor(constraint) }))),
    {
      code: 'generation_error',
      message: /allows no token/,
    },
  )
  t.equal(finishOf(await other).reason, 'length')
  await engine.close()
})

t.test('applyConstraintMask on a vocabulary that is not a multiple of 32', async (t) => {
  const vocab = 70
  const work = new Float32Array(vocab).fill(1)
  const mask = new Uint32Array(3)
  const constraint = new FakeConstraint(vocab, (id) => id === 0 || id === 33 || id === 69, 9)
  t.ok(applyConstraintMask(work, constraint, [], mask))
  t.same(
    [...work.keys()].filter((i) => work[i]! > -Infinity),
    [0, 33, 69],
  )
  const unconstrained: TokenConstraint = {
    fillNextTokenMask: () => false,
    accept: () => true,
    rollback: () => {},
    isTerminated: () => false,
    dispose: () => {},
  }
  const all = new Float32Array(vocab).fill(2)
  applyConstraintMask(all, unconstrained, [], mask)
  t.ok(
    all.every((x) => x === 2),
    'no mask: nothing changes',
  )
})

t.test('the engine builds the matcher from the grammar (data) and disposes it when the request ends', async (t) => {
  const { engine, constraints } = await startEngine()
  const constraint = new FakeConstraint(V, () => true, 3)
  let disposed = 0
  constraint.dispose = () => void disposed++
  await collect(engine.submit(makeRequest({ maxNewTokens: 20, grammar: constraints.grammarFor(constraint) })))
  t.equal(constraint.accepted.length, 3, 'the matcher the factory built ran the request')
  t.equal(disposed, 1, 'disposed once, when the request ended')

  // Cancelled while its matcher is being built: it never queues, and the matcher is disposed.
  const late = new FakeConstraint(V, () => true, 3)
  let lateDisposed = 0
  late.dispose = () => void lateDisposed++
  const controller = new AbortController()
  const events = engine.submit(
    makeRequest({ maxNewTokens: 20, grammar: constraints.grammarFor(late), signal: controller.signal }),
  )
  controller.abort()
  t.equal(finishOf(await collect(events)).reason, 'cancelled')
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(lateDisposed, 1, 'a matcher that arrives after the cancellation is disposed')
  t.same(late.accepted, [], 'and never used')
  await engine.close()
})

t.test('a grammar the factory cannot build fails that request alone', async (t) => {
  const { engine } = await startEngine()
  const other = collect(engine.submit(makeRequest({ maxNewTokens: 4 })))
  await t.rejects(collect(engine.submit(makeRequest({ grammar: { type: 'json_object' } }))), /no test matcher/)
  t.equal(finishOf(await other).reason, 'length')
  await engine.close()
})
