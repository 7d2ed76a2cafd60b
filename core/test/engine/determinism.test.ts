import t from 'tap'
import type { SamplingParams } from '../../src/contracts/sampling.ts'
import { collect, GREEDY, idsOf, makeRequest, startEngine } from './engine-fixtures.ts'

const SAMPLED: SamplingParams = {
  ...GREEDY,
  temperature: 0.8,
  topK: 40,
  topP: 0.95,
  typicalP: 1,
  repetitionPenalty: 1.1,
  frequencyPenalty: 0.2,
  presencePenalty: 0.1,
  seed: 42n,
}

t.test('greedy: identical concurrent requests give identical tokens, run after run', async (t) => {
  const { engine } = await startEngine({ vocabSize: 512 })
  const run = () =>
    Promise.all(
      Array.from({ length: 8 }, () =>
        collect(engine.submit(makeRequest({ inputIds: [4, 2, 4, 2], maxNewTokens: 10 }))),
      ),
    )
  const first = (await run()).map(idsOf)
  const second = (await run()).map(idsOf)
  for (const ids of [...first, ...second]) t.same(ids, first[0])
  await engine.close()
})

t.test('seeded sampling: same seed alone or in a batch of 16 gives the same tokens', async (t) => {
  const target = () => makeRequest({ inputIds: [11, 22, 33], maxNewTokens: 16, sampling: SAMPLED })
  const alone = await startEngine({ vocabSize: 512 })
  const reference = idsOf(await collect(alone.engine.submit(target())))
  await alone.engine.close()

  const busy = await startEngine({ vocabSize: 512 }, { maxBatchSize: 16, maxBatchPrefillTokens: 24 })
  const neighbours = Array.from({ length: 15 }, (_, i) =>
    collect(
      busy.engine.submit(
        makeRequest({
          inputIds: Array.from({ length: 3 + i }, (_, j) => (i * 7 + j) % 512),
          maxNewTokens: 5 + i,
          sampling: { ...SAMPLED, seed: BigInt(1000 + i), temperature: 0.5 + i / 10, topK: i },
        }),
      ),
    ),
  )
  const [mine] = await Promise.all([collect(busy.engine.submit(target())), ...neighbours])
  t.ok(
    busy.runner.batches.some((rows) => rows.length >= 10),
    'it really shared steps',
  )
  t.same(idsOf(mine!), reference)
  await busy.engine.close()
})

t.test('different seeds diverge; the seed is the only source of randomness', async (t) => {
  const { engine } = await startEngine({ vocabSize: 512 })
  const withSeed = (seed: bigint) =>
    collect(
      engine.submit(
        makeRequest({
          inputIds: [1, 2, 3],
          maxNewTokens: 20,
          sampling: { ...SAMPLED, temperature: 1.5, topK: 0, topP: 1, seed },
        }),
      ),
    )
  const a = idsOf(await withSeed(1n))
  const b = idsOf(await withSeed(2n))
  const a2 = idsOf(await withSeed(1n))
  t.same(a, a2)
  t.notSame(a, b)
  const big = idsOf(await withSeed(2n ** 64n - 1n))
  t.equal(big.length, 20, 'the full u64 range is accepted')
  await engine.close()
})
