import t from 'tap'
import type { AdapterHandle } from '../../src/contracts/adapter.ts'
import type { SamplingParams } from '../../src/contracts/sampling.ts'
import { DEFAULT_MEDUSA_CHOICES, MedusaTree } from '../../src/engine/medusa/medusa-tree.ts'
import { draftFromIds, topK } from '../../src/engine/medusa/draft.ts'
import { resolveSpeculator } from '../../src/engine/medusa/speculator-rules.ts'
import { adapterSalt, fakeGreedy, type FakeStepRunner, type RecordedRow } from './fake-step-runner.ts'
import {
  collect,
  FakeConstraint,
  finishOf,
  GREEDY,
  idsOf,
  localAdapter,
  localMedusa,
  makeRequest,
  startEngine,
  tokensOf,
} from './engine-fixtures.ts'

const V = 64
const ORACLE = [1, 1, 1, 1]
const PARTIAL = [0.9, 0.6, 0.4, 0.2]

const treeRows = (runner: FakeStepRunner): RecordedRow[] => runner.batches.flat().filter((row) => row.treeMask !== null)

t.test('the tree: sorted by depth, ancestor masks, prefixes, validation', async (t) => {
  const tree = new MedusaTree(DEFAULT_MEDUSA_CHOICES)
  t.equal(tree.size, 26)
  t.equal(tree.maxDepth, 4)
  t.ok(
    [...tree.depth].every((d, n) => n === 0 || d >= tree.depth[n - 1]!),
    'depth never decreases',
  )
  t.same([...tree.topKPerHead], [8, 9, 3, 1], 'top-k needed per head')
  t.equal(tree.nodesWithin(1), 9, 'root + 8 depth-1 candidates')
  t.equal(tree.nodesWithin(0), 1)
  const small = new MedusaTree([[1], [0], [0, 0], [1, 0], [0, 0, 0]])
  // Sorted: [0], [1], [0,0], [1,0], [0,0,0]
  t.same([...small.parent], [-1, 0, 0, 1, 2, 3])
  t.same([...small.rank], [-1, 0, 1, 0, 0, 0])
  t.same(
    [...small.mask(6)],
    [1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1],
  )
  t.same([...small.mask(3)], [1, 0, 0, 1, 1, 0, 1, 0, 1], 'a prefix mask is the top-left block')
  t.throws(() => new MedusaTree([[0, 1]]), /no parent \[0\]/)
  t.throws(() => new MedusaTree([[0], [0]]), /listed twice/)
  t.throws(() => new MedusaTree([[0], [-1]]), /rank -1/)
  t.throws(() => new MedusaTree([[]]), /non-empty/)
  t.equal(new MedusaTree([]).size, 1, 'an empty tree is just the root (speculation never happens)')
})

t.test('draft: head d top-k fills depth d + 1 by rank', async (t) => {
  t.same([...topK(Float32Array.of(1, 5, 3, 5, -Infinity, NaN), 0, 6, 3)], [1, 3, 2], 'ties to the lower id')
  // k = 1 takes a plain argmax path: the same answers as the general one.
  t.same([...topK(Float32Array.of(1, 5, 3, 5, -Infinity, NaN), 0, 6, 1)], [1], 'k = 1: first maximum')
  t.same([...topK(Float32Array.of(7, NaN, 2, 9, 9), 1, 4, 1)], [2], 'k = 1: NaN skipped, offset respected')
  t.same([...topK(Float32Array.of(NaN, -Infinity, -Infinity), 0, 3, 1)], [1], 'k = 1: all -Infinity: the first')
  const tree = new MedusaTree([[0], [1], [0, 0], [0, 1]])
  // Heads' best ids, [heads, k]: head 0 proposes 1, 2; head 1 proposes 0, 3.
  const ids = Int32Array.of(1, 2, 0, 3)
  const draft = draftFromIds(tree, 2, ids, 0, 2)
  t.same([...draft.tokens], [0, 1, 2, 0, 3])
  t.equal(draft.depth, 2)
  t.equal(draftFromIds(tree, 1, ids, 0, 2).depth, 1, 'one head: depth 1 only')
  t.same([...draftFromIds(tree, 1, ids, 0, 2).tokens], [0, 1, 2, 0, 0], 'one head: deeper nodes stay 0')
  // A chain proposes one candidate per head; an offset selects a row's block; -1 (no id) proposes 0.
  const chain = new MedusaTree([[0], [0, 0]])
  t.same([...draftFromIds(chain, 2, Int32Array.of(9, 9, 2, 3), 2, 1).tokens], [0, 2, 3], 'top-1s from an offset')
  t.same([...draftFromIds(chain, 2, Int32Array.of(5, -1), 0, 1).tokens], [0, 5, 0], 'an empty rank proposes 0')
})

t.test('greedy with Medusa equals greedy decoding, whatever the heads propose', async (t) => {
  for (const accuracy of [ORACLE, PARTIAL, [0, 0, 0, 0]]) {
    const { engine, runner } = await startEngine({ medusaAccuracy: accuracy })
    const medusa = await engine.loadAdapter(localMedusa('heads'))
    const prompts = Array.from({ length: 6 }, (_, i) => [i + 1, 2 * i + 3, 7, 9 + i])
    const results = await Promise.all(
      prompts.map((p) => collect(engine.submit(makeRequest({ inputIds: p, maxNewTokens: 20, speculator: medusa })))),
    )
    prompts.forEach((p, i) => t.same(idsOf(results[i]!), fakeGreedy(p, -1, V, 20), `heads ${accuracy}: request ${i}`))
    t.same(runner.violations, [], 'positions, masks, cache reads all consistent')
    const stats = engine.speculationStats()
    t.ok(stats.verifySteps > 0, 'trees were verified')
    for (const r of results) {
      const tokens = tokensOf(r)
      const skipped = tokens.filter((tok) => tok.skipped).length
      const events = r.filter((e) => e.type === 'tokens')
      t.equal(events.length + skipped, tokens.length, 'one non-skipped token per step, the rest skipped')
      for (const e of events) {
        if (e.type !== 'tokens') continue
        t.equal(e.tokens[0]!.skipped, false)
        t.ok(e.tokens.slice(1).every((tok) => tok.skipped))
      }
    }
    if (accuracy === ORACLE) {
      // ~4 per full-tree step; the adaptive policy's warm-up also tries halved trees (depth < 4).
      t.ok(
        stats.acceptedTokens / stats.verifySteps >= 2.5,
        `oracle heads accept up to 4 per step (${stats.acceptedTokens}/${stats.verifySteps})`,
      )
      t.ok(runner.batches.length < 12, `far fewer steps than tokens (${runner.batches.length})`)
    }
    if (accuracy[0] === 0) t.ok(stats.acceptedTokens <= stats.verifySteps, 'random heads rarely hit')
    t.equal(
      stats.acceptedHistogram.reduce((a, b) => a + b, 0),
      stats.verifySteps,
      'histogram covers every verification',
    )
    t.equal(stats.emittedTokens, stats.verifySteps + stats.acceptedTokens)
    t.ok(stats.heads.every((h) => h.accepted <= h.proposed))
    for (let h = 1; h < stats.heads.length; h++) t.ok(stats.heads[h]!.accepted <= stats.heads[h - 1]!.accepted)
    await engine.close()
  }
})

t.test(
  'verification rows: root + candidates at depth positions, ancestor mask, logits everywhere, heads on the rank-0 chain',
  async (t) => {
    const choices = [[0], [1], [0, 0], [1, 0]]
    const { engine, runner } = await startEngine({ medusaAccuracy: ORACLE }, {}, undefined, {
      speculation: { choices, adaptive: false },
    })
    const medusa = await engine.loadAdapter(localMedusa('heads-2'))
    const events = await collect(
      engine.submit(makeRequest({ inputIds: [1, 2, 3, 4], maxNewTokens: 9, speculator: medusa })),
    )
    t.same(idsOf(events), fakeGreedy([1, 2, 3, 4], -1, V, 9))
    const [prefill, ...rest] = runner.batches.map((rows) => rows[0]!)
    t.ok(prefill!.sampled, 'the prefill samples at its last position, where its heads run')
    t.ok(prefill!.medusaSlot >= 0)
    const tree = rest.filter((row) => row.treeMask !== null)
    t.ok(tree.length >= 2)
    const full = [1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1]
    for (const [i, row] of tree.entries()) {
      // Full trees, except the last, cut to depth 1 by the two tokens still allowed.
      const n = row.tokens.length
      t.equal(n, i === tree.length - 1 ? 3 : 5)
      t.same(
        row.positions,
        [0, 1, 1, 2, 2].slice(0, n).map((d) => row.cacheLen + d),
      )
      t.same(row.treeMask, n === 5 ? full : [1, 0, 0, 1, 1, 0, 1, 0, 1])
      t.ok(row.sampled, 'a verification row samples every node')
      t.ok(row.medusaSlot >= 0, 'its heads run where the walk ends')
    }
    // Oracle heads: top-1 is always right, so the accepted path is nodes 1 ([0]) then 3 ([0, 0]):
    // node 3's entry (cacheLen + 3) moves to cacheLen + 2 before the next step.
    for (let s = 1; s < runner.batches.length; s++) {
      const row = runner.batches[s]![0]!
      if (row.treeMask === null) continue
      const next = runner.copies[s + 1]
      if (next === undefined) continue
      t.same(next, [
        { blockTable: runner.batches[s + 1]![0]!.blockTable, from: [row.cacheLen + 3], to: [row.cacheLen + 2] },
      ])
      t.equal(runner.batches[s + 1]![0]!.cacheLen, row.cacheLen + 3, 'root + 2 accepted committed')
    }
    t.same(runner.violations, [])
    await engine.close()
  },
)

t.test('stop rules cut inside an accepted run', async (t) => {
  const { engine } = await startEngine({ medusaAccuracy: ORACLE, maxContextLength: 14 })
  const medusa = await engine.loadAdapter(localMedusa('heads'))
  const prompt = [5, 6, 7]
  const greedy = fakeGreedy(prompt, -1, V, 11)
  for (const max of [1, 2, 3, 5, 6, 7]) {
    const events = await collect(
      engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: max, speculator: medusa })),
    )
    t.same(idsOf(events), greedy.slice(0, max), `max_new_tokens ${max}`)
    t.equal(finishOf(events).reason, 'length')
  }
  // eos in the middle of a run (the 4th token is the first occurrence of that id).
  const eosAt = greedy.findIndex((id, i) => i >= 3 && greedy.indexOf(id) === i)
  const eos = greedy[eosAt]!
  const events = await collect(
    engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: 11, eosTokenIds: [eos], speculator: medusa })),
  )
  t.same(idsOf(events), greedy.slice(0, eosAt + 1), 'ends on the eos token')
  t.equal(finishOf(events).reason, 'eos_token')
  // Context limit 14: prompt 3 + 11 tokens.
  const long = await collect(engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: 100, speculator: medusa })))
  t.same(idsOf(long), greedy.slice(0, 11), 'context limit')
  t.equal(finishOf(long).reason, 'length')
  await engine.close()
})

t.test('mixed batches: LoRA and base rows speculate, rows without a speculator decode plainly', async (t) => {
  const { engine, runner } = await startEngine({ medusaAccuracy: PARTIAL, saltByAdapterKey: true })
  const medusa = await engine.loadAdapter(localMedusa('heads'))
  const loras = [await engine.loadAdapter(localAdapter('a')), await engine.loadAdapter(localAdapter('b'))]
  const cases = Array.from({ length: 12 }, (_, i) => ({
    prompt: [i + 1, 3, 5, i + 7],
    adapter: i % 3 === 0 ? null : loras[i % 2]!,
    speculator: i % 4 === 3 ? null : medusa,
  }))
  const results = await Promise.all(
    cases.map((c) =>
      collect(
        engine.submit(
          makeRequest({ inputIds: c.prompt, maxNewTokens: 16, adapter: c.adapter, speculator: c.speculator }),
        ),
      ),
    ),
  )
  cases.forEach((c, i) => {
    const salt = c.adapter === null ? -1 : adapterSalt(c.adapter.key)
    t.same(idsOf(results[i]!), fakeGreedy(c.prompt, salt, V, 16), `case ${i}`)
    if (c.speculator === null)
      t.ok(
        tokensOf(results[i]!).every((tok) => !tok.skipped),
        'plain rows skip nothing',
      )
  })
  const mixed = runner.batches.some(
    (rows) => rows.some((r) => r.treeMask !== null && r.loraSlot >= 0) && rows.some((r) => r.medusaSlot < 0),
  )
  t.ok(mixed, 'a step carried LoRA verification rows next to plain rows')
  t.same(runner.violations, [])
  await engine.close()
})

t.test('speculation switches off above the batch size and shares the candidate budget fairly', async (t) => {
  {
    const { engine, runner } = await startEngine({ medusaAccuracy: ORACLE }, {}, undefined, {
      speculation: { maxBatchSize: 2 },
    })
    const medusa = await engine.loadAdapter(localMedusa('heads'))
    const prompts = [[1], [2], [3], [4]]
    const results = await Promise.all(
      prompts.map((p) => collect(engine.submit(makeRequest({ inputIds: p, maxNewTokens: 8, speculator: medusa })))),
    )
    prompts.forEach((p, i) => t.same(idsOf(results[i]!), fakeGreedy(p, -1, V, 8)))
    for (const rows of runner.batches) {
      if (rows.length > 2) {
        t.ok(
          rows.every((r) => r.treeMask === null && r.medusaSlot < 0),
          'no trees and no head logits above the batch size',
        )
      }
    }
    t.equal(treeRows(runner).length, 0, 'four running all along: never speculated')
    await engine.close()
  }
  {
    const { engine, runner } = await startEngine({ medusaAccuracy: ORACLE }, {}, undefined, {
      speculation: { maxTokens: 10 },
    })
    const medusa = await engine.loadAdapter(localMedusa('heads'))
    const prompts = [[1], [2], [3], [4]]
    const results = await Promise.all(
      prompts.map((p) => collect(engine.submit(makeRequest({ inputIds: p, maxNewTokens: 30, speculator: medusa })))),
    )
    prompts.forEach((p, i) => t.same(idsOf(results[i]!), fakeGreedy(p, -1, V, 30)))
    for (const rows of runner.batches) {
      const candidates = rows.reduce((s, r) => s + (r.treeMask === null ? 0 : r.tokens.length - 1), 0)
      t.ok(candidates <= 10, 'candidate budget per step')
    }
    const perSeq = new Map<number, number>()
    for (const row of treeRows(runner)) perSeq.set(row.seqId, (perSeq.get(row.seqId) ?? 0) + 1)
    t.equal(perSeq.size, 4, 'every sequence got trees')
    const counts = [...perSeq.values()]
    t.ok(Math.max(...counts) - Math.min(...counts) <= 2, `the budget rotates (${counts})`)
    t.same(runner.violations, [])
    await engine.close()
  }
})

t.test('seeded sampling with Medusa equals seeded sampling without, and repeats', async (t) => {
  const { engine } = await startEngine({ medusaAccuracy: ORACLE })
  const medusa = await engine.loadAdapter(localMedusa('heads'))
  const samplings: SamplingParams[] = [
    { ...GREEDY, temperature: 0.3, seed: 7n },
    { ...GREEDY, temperature: 1, topK: 5, topP: 0.9, seed: 99n },
    { ...GREEDY, temperature: 0.8, repetitionPenalty: 1.3, frequencyPenalty: 0.5, seed: 3n },
  ]
  for (const sampling of samplings) {
    const run = async (speculator: AdapterHandle | null) =>
      idsOf(await collect(engine.submit(makeRequest({ inputIds: [9, 8, 7], maxNewTokens: 24, sampling, speculator }))))
    const plain = await run(null)
    const first = await run(medusa)
    t.same(first, plain, `same tokens as plain sampling (seed ${sampling.seed})`)
    t.same(await run(medusa), first, 'reproducible')
  }
  t.ok(engine.speculationStats().acceptedTokens > 0, 'low-temperature samples do accept candidates')
  await engine.close()
})

t.test('grammar-constrained rows speculate and produce the unconstrained engine output', async (t) => {
  const { engine, constraints } = await startEngine({ medusaAccuracy: PARTIAL })
  const medusa = await engine.loadAdapter(localMedusa('heads'))
  const run = async (speculator: AdapterHandle | null) => {
    const constraint = new FakeConstraint(V, (id) => id % 2 === 0, 12)
    const grammar = constraints.grammarFor(constraint)
    const events = await collect(
      engine.submit(makeRequest({ inputIds: [1, 3, 5], maxNewTokens: 20, eosTokenIds: [63], grammar, speculator })),
    )
    return { ids: idsOf(events), accepted: constraint.accepted, reason: finishOf(events).reason }
  }
  const plain = await run(null)
  const spec = await run(medusa)
  t.same(spec, plain, 'same tokens, same constraint history, same ending')
  t.ok(spec.ids.slice(0, 12).every((id) => id % 2 === 0))
  await engine.close()
})

t.test('preemption and recompute keep speculative output exact', async (t) => {
  const { engine, runner } = await startEngine({ medusaAccuracy: PARTIAL, kvBlockCount: 14, kvBlockSize: 4 })
  const medusa = await engine.loadAdapter(localMedusa('heads'))
  const prompts = [
    [1, 2, 3, 4],
    [5, 6, 7, 8],
    [9, 10, 11, 12],
  ]
  const results = await Promise.all(
    prompts.map((p) => collect(engine.submit(makeRequest({ inputIds: p, maxNewTokens: 14, speculator: medusa })))),
  )
  prompts.forEach((p, i) => t.same(idsOf(results[i]!), fakeGreedy(p, -1, V, 14), `request ${i}`))
  t.same(runner.violations, [])
  for (const rows of runner.batches) t.ok(rows.reduce((s, r) => s + r.blockTable.length, 0) <= 14)
  await engine.close()
})

t.test('submit checks handle kinds', async (t) => {
  const { engine } = await startEngine()
  const lora = await engine.loadAdapter(localAdapter('x'))
  const medusa = await engine.loadAdapter(localMedusa('m'))
  t.throws(() => engine.submit(makeRequest({ speculator: lora })), { code: 'bad_request' })
  t.throws(() => engine.submit(makeRequest({ adapter: medusa })), { code: 'bad_request' })
  await engine.close()
})

t.test('per-request Medusa rules', async (t) => {
  const def: AdapterHandle = { key: 'hub:default@1', id: 'default', kind: 'medusa', size: 4 }
  const other: AdapterHandle = { key: 'hub:other@1', id: 'other', kind: 'medusa', size: 4 }
  const three: AdapterHandle = { key: 'hub:three@1', id: 'three', kind: 'medusa', size: 3 }
  t.equal(resolveSpeculator(null, null), null, 'no default, none requested: plain decoding')
  t.equal(resolveSpeculator(null, def), def, 'the default applies to every request')
  t.equal(resolveSpeculator(other, def), other, 'a matching per-request adapter replaces it')
  t.throws(() => resolveSpeculator(other, null, 'other'), {
    code: 'medusa_no_default',
    message: /`other` cannot be used per request: the server was started without a default Medusa adapter/,
  })
  t.throws(() => resolveSpeculator(three, def, 'three'), {
    code: 'medusa_heads_mismatch',
    message: /`three` has 3 heads; .* the 4 heads of the default/,
  })
  t.throws(() => resolveSpeculator({ key: 'k', id: 'k', kind: 'lora', size: 8 }, def), { code: 'bad_request' })
})
