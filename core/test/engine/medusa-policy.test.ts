import t from 'tap'
import type { SamplingParams } from '../../src/contracts/sampling.ts'
import { fakeGreedy, type RecordedRow } from './fake-step-runner.ts'
import { collect, GREEDY, idsOf, localAdapter, localMedusa, makeRequest, startEngine } from './engine-fixtures.ts'

const V = 64
const ORACLE = [1, 1, 1, 1]
const MISS = [0, 0, 0, 0]

t.test('per-adapter policy: base rows keep speculating beside adapter rows whose heads miss', async (t) => {
  // The base model's heads are right, the same heads under the adapter never are. Steps cost a
  // fixed 2 ms (as a memory-bound model's do), so the cost model sees trees as cheap.
  const { engine, runner } = await startEngine({ medusaAccuracy: ORACLE, adapterMedusaAccuracy: MISS, stepDelayMs: 2 })
  const medusa = await engine.loadAdapter(localMedusa('heads'))
  const lora = await engine.loadAdapter(localAdapter('kjv'))
  const loraSlot = runner.loadedWeights.findIndex((w) => w?.kind === 'lora')
  const prompts = Array.from({ length: 8 }, (_, i) => [i + 3, 2 * i + 1, 9, 4 + i])
  // Interleaved, one at a time: base, adapter, base, adapter, ...
  const baseSteps: number[] = []
  for (const [i, p] of prompts.entries()) {
    const adapter = i % 2 === 1 ? lora : null
    const before = runner.batches.length
    const events = await collect(
      engine.submit(makeRequest({ inputIds: p, maxNewTokens: 40, adapter, speculator: medusa })),
    )
    t.same(idsOf(events), fakeGreedy(p, adapter === null ? -1 : loraSlot, V, 40), `request ${i}: greedy output`)
    if (adapter === null) baseSteps.push(runner.batches.length - before)
  }
  t.same(runner.violations, [])
  // Every base request after the adapter ones still speculates with the oracle heads: 40 tokens in
  // well under the 40 steps of plain decoding (about 9 alone; step timing adds noise), whatever
  // the adapter's misses taught its own key.
  t.ok(
    baseSteps.slice(1).every((steps) => steps < 20),
    `base requests take few steps whatever the adapter's heads did (${baseSteps.join(', ')})`,
  )
  await engine.close()
})

t.test('mixed batches: every row its own tree size, outputs lossless (greedy and seeded)', async (t) => {
  const samplings: SamplingParams[] = [GREEDY, { ...GREEDY, temperature: 0.7, seed: 11n }]
  const run = async (speculate: boolean) => {
    const { engine, runner } = await startEngine({ medusaAccuracy: ORACLE, adapterMedusaAccuracy: [0.5, 0.2, 0, 0] })
    const medusa = await engine.loadAdapter(localMedusa('heads'))
    const kjv = await engine.loadAdapter(localAdapter('kjv'))
    const devil = await engine.loadAdapter(localAdapter('devil'))
    const requests = Array.from({ length: 12 }, (_, i) =>
      makeRequest({
        inputIds: [i + 1, 5, 2 * i + 7, 3],
        maxNewTokens: 48,
        adapter: [null, kjv, devil][i % 3]!,
        sampling: samplings[Math.floor(i / 3) % 2]!,
        speculator: speculate ? medusa : null,
      }),
    )
    const results = await Promise.all(requests.map((r) => collect(engine.submit(r))))
    t.same(runner.violations, [])
    await engine.close()
    return { outputs: results.map(idsOf), batches: runner.batches }
  }
  const plain = await run(false)
  const fast = await run(true)
  fast.outputs.forEach((ids, i) => t.same(ids, plain.outputs[i], `request ${i}: same tokens as without speculation`))
  // Some step verified trees of different sizes for different rows.
  const sizes = (rows: RecordedRow[]) => new Set(rows.filter((r) => r.treeMask !== null).map((r) => r.tokens.length))
  t.ok(
    fast.batches.some((rows) => sizes(rows).size >= 2),
    'a step with verification rows of different tree sizes',
  )
})
