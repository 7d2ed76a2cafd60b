import t from 'tap'
import type { SamplingParams } from '../../src/contracts/sampling.ts'
import { fakeGreedy } from './fake-step-runner.ts'
import { collect, finishOf, GREEDY, idsOf, makeRequest, startEngine } from './engine-fixtures.ts'

const V = 64

function preemptedSeqIds(batches: { seqId: number; cacheLen: number }[][]): Set<number> {
  const started = new Set<number>()
  const preempted = new Set<number>()
  for (const rows of batches) {
    for (const row of rows) {
      if (row.cacheLen > 0) started.add(row.seqId)
      else if (started.has(row.seqId)) preempted.add(row.seqId)
    }
  }
  return preempted
}

t.test('when blocks run out the newest sequence is preempted and recomputed; outputs are unchanged', async (t) => {
  // 6 blocks × 4 slots; each request ends at 15 cache entries (4 blocks), 3 of them need 12.
  const { engine, runner } = await startEngine({ kvBlockCount: 6, kvBlockSize: 4 })
  const prompts = [
    [1, 2, 3, 4],
    [5, 6, 7, 8],
    [9, 10, 11, 12],
  ]
  const results = await Promise.all(
    prompts.map((p) => collect(engine.submit(makeRequest({ inputIds: p, maxNewTokens: 12 })))),
  )
  prompts.forEach((p, i) => {
    t.same(idsOf(results[i]!), fakeGreedy(p, -1, V, 12), `request ${i}`)
    t.equal(finishOf(results[i]!).reason, 'length')
  })
  const preempted = preemptedSeqIds(runner.batches)
  t.ok(preempted.size > 0, `preemption happened (seqs ${[...preempted]})`)
  t.notOk(preempted.has(runner.batches[0]![0]!.seqId), 'the oldest sequence is never the victim')
  for (const rows of runner.batches) {
    const used = rows.reduce((s, r) => s + r.blockTable.length, 0)
    t.ok(used <= 6, 'never more blocks than exist')
  }
  t.same(runner.violations, [], 'no sequence read a cache entry it did not write')
  t.equal(engine.stats().kvBlocksFree, 6)
  await engine.close()
})

t.test('seeded sampling survives preemption unchanged', async (t) => {
  const sampling: SamplingParams = { ...GREEDY, temperature: 0.9, topK: 20, seed: 77n }
  const alone = await startEngine()
  const reference = await Promise.all(
    [0, 1, 2].map((i) =>
      collect(
        alone.engine.submit(
          makeRequest({ inputIds: [i + 1, 2, 3], maxNewTokens: 12, sampling: { ...sampling, seed: BigInt(i) } }),
        ),
      ),
    ),
  )
  await alone.engine.close()
  const tight = await startEngine({ kvBlockCount: 5, kvBlockSize: 4 })
  const results = await Promise.all(
    [0, 1, 2].map((i) =>
      collect(
        tight.engine.submit(
          makeRequest({ inputIds: [i + 1, 2, 3], maxNewTokens: 12, sampling: { ...sampling, seed: BigInt(i) } }),
        ),
      ),
    ),
  )
  t.ok(preemptedSeqIds(tight.runner.batches).size > 0, 'preemption happened')
  results.forEach((events, i) => t.same(idsOf(events), idsOf(reference[i]!), `request ${i}`))
  await tight.engine.close()
})

t.test('a prompt larger than the whole cache fails with generation_error; others carry on', async (t) => {
  const { engine } = await startEngine({ kvBlockCount: 2, kvBlockSize: 4 })
  await t.rejects(collect(engine.submit(makeRequest({ inputIds: [1, 2, 3, 4, 5, 6, 7, 8, 9], maxNewTokens: 2 }))), {
    code: 'generation_error',
    message: /more KV cache than the 2 blocks of 4 tokens/,
  })
  const ok = await collect(engine.submit(makeRequest({ inputIds: [1, 2], maxNewTokens: 3 })))
  t.same(idsOf(ok), fakeGreedy([1, 2], -1, V, 3))
  t.equal(engine.stats().kvBlocksFree, 2)
  await engine.close()
})

t.test('a sequence that outgrows the whole cache fails after streaming what fit', async (t) => {
  const { engine } = await startEngine({ kvBlockCount: 2, kvBlockSize: 4 })
  const tokens: number[] = []
  await t.rejects(
    (async () => {
      for await (const event of engine.submit(makeRequest({ inputIds: [1, 2, 3], maxNewTokens: 20 }))) {
        if (event.type === 'tokens') tokens.push(...event.tokens.map((x) => x.id))
      }
    })(),
    { code: 'generation_error' },
  )
  t.same(tokens, fakeGreedy([1, 2, 3], -1, V, 20).slice(0, tokens.length))
  t.ok(tokens.length >= 5, `${tokens.length} tokens streamed before the cache ran out`)
  t.equal(engine.stats().kvBlocksFree, 2)
  await engine.close()
})
