import t from 'tap'
import type { SamplingParams } from '../../src/contracts/sampling.ts'
import { lookupDraft, lookupTree } from '../../src/engine/medusa/prompt-lookup.ts'
import { collect, GREEDY, idsOf, localAdapter, localMedusa, makeRequest, startEngine } from './engine-fixtures.ts'

t.test('lookup: the latest earlier match of the longest n-gram drafts what followed it', async (t) => {
  const tree = lookupTree(4)
  t.same(tree.paths, ['', '0', '0,0', '0,0,0', '0,0,0,0'], 'a chain four deep')
  const options = { ngramSize: 3, draftTokens: 4 }
  const draft = (tokens: number[]) => {
    const d = lookupDraft(tokens, options, tree)
    return d === null ? null : [...d.tokens.subarray(1, d.depth + 1)]
  }
  // `1 2 3` occurs at 0 and 5; the latest one (5) is followed by 9 8.
  t.same(draft([1, 2, 3, 4, 5, 1, 2, 3, 9, 8, 1, 2, 3]), [9, 8, 1, 2])
  t.same(draft([7, 1, 2, 3, 4, 5, 6, 1, 2, 3]), [4, 5, 6, 1], 'one earlier occurrence')
  t.same(draft([5, 6, 9, 4, 6]), [9, 4, 6], 'no trigram or bigram match: the last token alone')
  t.same(draft([1, 2, 3, 4]), null, 'nothing repeats: no draft')
  t.same(draft([4, 1, 4]), [1, 4], 'the draft stops at the end of the tokens')
  t.same(draft([3]), null, 'a single token has nothing before it')
  t.same(lookupDraft([1, 2, 1, 2, 1], { ngramSize: 2, draftTokens: 2 }, lookupTree(2))?.depth, 2)
})

t.test('prompt lookup in mixed batches: lossless beside Medusa rows and adapters', async (t) => {
  const samplings: SamplingParams[] = [GREEDY, { ...GREEDY, temperature: 0.8, topK: 8, seed: 5n }]
  // Prompts that repeat themselves, so lookups find matches.
  const prompts = Array.from({ length: 12 }, (_, i) => [1, 2, 3, i + 4, 1, 2, 3, 5, 6, 1, 2, 3, i + 4, 1, 2])
  const run = async (promptLookup: boolean) => {
    const { engine, runner } = await startEngine({ medusaAccuracy: [0.8, 0.5, 0.3, 0.1] }, {}, undefined, {
      speculation: promptLookup ? { promptLookup: { ngramSize: 3, draftTokens: 4 } } : {},
    })
    const medusa = await engine.loadAdapter(localMedusa('heads'))
    const kjv = await engine.loadAdapter(localAdapter('kjv'))
    const requests = prompts.map((inputIds, i) =>
      makeRequest({
        inputIds,
        maxNewTokens: 32,
        adapter: i % 3 === 1 ? kjv : null,
        // Every third request has Medusa heads (the others draft by lookup when it is on).
        speculator: i % 3 === 2 ? medusa : null,
        sampling: samplings[i % 2]!,
      }),
    )
    const results = await Promise.all(requests.map((r) => collect(engine.submit(r))))
    t.same(runner.violations, [], 'positions, masks and cache reads consistent')
    const stats = engine.speculationStats()
    await engine.close()
    return { outputs: results.map(idsOf), runner, stats }
  }
  const plain = await run(false)
  const lookup = await run(true)
  lookup.outputs.forEach((ids, i) => t.same(ids, plain.outputs[i], `request ${i}: same tokens as without lookup`))
  const medusaSeqs = new Set(lookup.runner.batches.flat().flatMap((row) => (row.medusaSlot >= 0 ? [row.seqId] : [])))
  const lookupTrees = lookup.runner.batches.flat().filter((row) => row.treeMask !== null && !medusaSeqs.has(row.seqId))
  t.ok(lookupTrees.length > 0, `rows without heads verified lookup drafts (${lookupTrees.length})`)
  t.ok(
    lookupTrees.every((row) => row.medusaSlot < 0),
    'lookup rows ask for no heads',
  )
  t.ok(
    lookupTrees.every((row) => row.tokens.length <= 5),
    'a lookup draft is a chain of at most draft_tokens',
  )
  t.ok(lookup.stats.verifySteps > plain.stats.verifySteps, 'more verification rows with lookup on')
})

t.test('prompt lookup options are checked', async (t) => {
  await t.rejects(
    startEngine({}, {}, undefined, { speculation: { promptLookup: { ngramSize: -1, draftTokens: 4 } } }),
    /ngramSize/,
  )
})
