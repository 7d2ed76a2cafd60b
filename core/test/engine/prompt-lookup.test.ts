import t from 'tap'
import type { SamplingParams } from '../../src/contracts/sampling.ts'
import { draftFromIds, withLookupChain } from '../../src/engine/medusa/draft.ts'
import { DEFAULT_MEDUSA_CHOICES, MedusaTree } from '../../src/engine/medusa/medusa-tree.ts'
import { lookupDraft, lookupFamily, lookupTree } from '../../src/engine/medusa/prompt-lookup.ts'
import { AdaptiveTreePolicy } from '../../src/engine/medusa/tree-policy.ts'
import { EventChannel } from '../../src/engine/event-channel.ts'
import { KvBlockAllocator } from '../../src/engine/kv-block-allocator.ts'
import { SamplingState } from '../../src/engine/sampler/sampling-state.ts'
import { Scheduler } from '../../src/engine/scheduler.ts'
import { Sequence } from '../../src/engine/sequence.ts'
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
      // adaptive off: every draft is verified (the policy times the fake runner's steps by the
      // real clock, so how many it verifies would depend on the host's load).
      speculation: promptLookup
        ? { adaptive: false, promptLookup: { ngramSize: 3, draftTokens: 4 } }
        : { adaptive: false },
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

t.test("a lookup chain on the heads' top-1 path keeps the heads' other candidates", async (t) => {
  const tree = new MedusaTree(DEFAULT_MEDUSA_CHOICES)
  const heads = tree.maxDepth
  const k = Math.max(...tree.topKPerHead)
  // Head d's rank-r candidate is 1000 * (d + 1) + r.
  const ids = Int32Array.from({ length: heads * k }, (_, i) => 1000 * (Math.floor(i / k) + 1) + (i % k))
  const plain = draftFromIds(tree, heads, ids, 0, k)
  const chain = lookupDraft([7, 8, 9, 1, 2, 3, 7, 8, 9], { ngramSize: 3, draftTokens: 3 }, lookupTree(3), 3)!
  t.same([...chain.tokens.subarray(1, 4)], [1, 2, 3], 'the chain: what followed the earlier 7 8 9')
  const mixed = withLookupChain(tree, plain, chain, ids, 0, k)
  const at = (path: string) => mixed.tokens[tree.nodeOf.get(path)!]
  t.same([at('0'), at('0,0'), at('0,0,0')], [1, 2, 3], 'the chain on the top-1 path')
  t.equal(at('0,0,0,0'), 4000, 'below the chain the heads draft as before')
  t.same([at('1'), at('2')], [1000, 1001], "the heads' best move one rank down beside the chain")
  t.equal(at('0,1'), 2000, 'at every level on the chain')
  t.equal(at('1,0'), plain.tokens[tree.nodeOf.get('1,0')!], "below a heads' node nothing changes")
  t.equal(mixed.depth, plain.depth)
  t.equal(
    lookupDraft([5, 6, 9, 4, 6], { ngramSize: 3, draftTokens: 4 }, lookupTree(4), 3),
    null,
    'minNgram: a one-token match does not count',
  )
})

t.test('the scheduler searches a lookup row only when the policy wants a draft for some match length', async (t) => {
  const key = 'base|prompt-lookup'
  /**
   * Plans 200 decode steps of one prompt-lookup sequence whose searches find an n-gram match of
   * `match` tokens (0: none); returns how many steps searched and how many verified a tree.
   */
  const run = (policy: AdaptiveTreePolicy, match: number): { searched: number; trees: number } => {
    let searched = 0
    let trees = 0
    const tree = lookupTree(4)
    const scheduler = new Scheduler(
      new KvBlockAllocator(64, 16),
      { maxBatchSize: 8, maxBatchPrefillTokens: 256 },
      64,
      () => -1,
      {
        familyOf: (_seq, policyKey) => policy.family(policyKey, () => lookupFamily(tree)),
        maxBatchSize: 32,
        maxTokens: 64,
        contextLimit: 1024,
        medusaSlotOf: () => -1,
        lookupDraft: () => {
          searched++
          return match === 0 ? null : { tokens: Int32Array.of(0, 7, 7, 7, 7), depth: 4, match }
        },
        lookupNgram: 3,
        policy,
      },
    )
    const request = makeRequest({ inputIds: [1, 2, 3, 4], maxNewTokens: 500 })
    const seq = new Sequence({
      seqId: 1,
      request,
      queueKey: 'base',
      sampling: new SamplingState(request.sampling, request.inputIds),
      channel: new EventChannel(() => {}),
      submittedAt: 0,
      drafter: 'prompt-lookup',
      policyKey: key,
    })
    scheduler.enqueue(seq)
    for (let step = 0; step <= 200; step++) {
      const { rows } = scheduler.plan()
      if (rows.length !== 1) throw new Error(`step ${step}: ${rows.length} rows`)
      const fed = rows[0]!.row.tokens.length
      if (step > 0 && fed > 1) trees++
      // What the engine does with a row when nothing is accepted: its first token is cached, the next one sampled.
      seq.cacheLen += step === 0 ? fed : 1
      seq.tokens.push(7)
    }
    return { searched: searched, trees }
  }
  /**
   * A policy whose 5-token steps cost `treeMs` (a plain step 0.35 ms) and whose drafts under
   * `plainKeys` never matched: those decode plainly.
   */
  const deciding = (plainKeys: string[], treeMs = 1.75): AdaptiveTreePolicy => {
    const policy = new AdaptiveTreePolicy()
    const families = plainKeys.map((k) => policy.family(k, () => lookupFamily(lookupTree(4))))
    for (let i = 0; i < 40; i++) {
      policy.recordStep(i % 2 === 0 ? 1 : 5, i % 2 === 0 ? 0.35 : treeMs, i % 2 === 1)
      plainKeys.forEach((k, j) => policy.recordChildren(k, families[j]!.full, 0, 5, -1))
    }
    for (const k of plainKeys)
      t.equal(policy.choose([{ key: k, rows: 1, depth: 4, heads: 0 }])[0], 0, `${k}: plain decoding`)
    return policy
  }
  t.equal(
    run(new AdaptiveTreePolicy(), 0).searched,
    200,
    'keys the policy has not decided against: a search every decode step',
  )
  const allPlain = run(deciding([1, 2, 3].map((n) => `${key}|n${n}`)), 3)
  t.ok(
    allPlain.searched <= 4,
    `every match length plain: searches only for the policy's rare tries (${allPlain.searched} of 200 steps)`,
  )
  // Trees that cost little more than a plain step: one-token matches that never matched decode
  // plainly, while three-token matches are a key of their own, not yet judged.
  const weak = run(deciding([`${key}|n1`], 0.42), 1)
  t.equal(weak.searched, 200, 'longer matches may still pay: a search every step')
  // Cheap trees make the policy hopeful, so it tries more often than the hopeless case above.
  t.ok(
    weak.trees <= 20,
    `a one-token match's draft is verified only on the policy's tries (${weak.trees} of 200 steps)`,
  )
  const strong = run(deciding([`${key}|n1`], 0.42), 3)
  t.ok(strong.trees >= 100, `a three-token match's draft is verified (${strong.trees} of 200 steps)`)
})
