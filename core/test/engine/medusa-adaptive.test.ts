import t from 'tap'
import { DEFAULT_MEDUSA_CHOICES, MedusaTree } from '../../src/engine/medusa/medusa-tree.ts'
import { lookupFamily, lookupTree } from '../../src/engine/medusa/prompt-lookup.ts'
import { TreeFamily } from '../../src/engine/medusa/tree-family.ts'
import { AdaptiveTreePolicy } from '../../src/engine/medusa/tree-policy.ts'
import { fakeGreedy } from './fake-step-runner.ts'
import { collect, idsOf, localMedusa, makeRequest, startEngine } from './engine-fixtures.ts'

const V = 64

t.test('tree family: the list order when it is ancestor-closed, else the sorted order', async (t) => {
  const full = new MedusaTree(DEFAULT_MEDUSA_CHOICES)
  const family = new TreeFamily(full, DEFAULT_MEDUSA_CHOICES)
  t.equal(family.order.length, 25)
  const two = family.get(2)
  t.same(two.tree.paths, ['', '0', '0,0'], 'the first two choices: a chain')
  t.same([...two.fullNode], [0, 1, 9])
  t.equal(family.get(25), family.full)
  t.equal(family.get(0).tree.size, 1)
  const unordered = [[0, 0], [0], [1]]
  const other = new TreeFamily(new MedusaTree(unordered), unordered)
  t.same(other.get(1).tree.paths, ['', '0'], 'a child listed before its parent: sorted order')
})

/** A policy with one key, `k`, whose family is the default tree; `choose(rows, depth, heads)` for it alone. */
function onePolicy(): {
  policy: AdaptiveTreePolicy
  family: TreeFamily
  choose: (rows: number, depth: number, heads: number) => number
  wantsHeads: (keys?: number) => boolean
} {
  const policy = new AdaptiveTreePolicy()
  const family = policy.family(
    'k',
    () => new TreeFamily(new MedusaTree(DEFAULT_MEDUSA_CHOICES), DEFAULT_MEDUSA_CHOICES),
  )
  return {
    policy,
    family,
    choose: (rows, depth, heads) => policy.choose([{ key: 'k', rows, depth, heads }])[0]!,
    wantsHeads: (keys = 1) => policy.wantsDraft('k', 1, 0, keys),
  }
}

/** Feed `policy` 40 steps costing `fixed + perWork·work`, and walks of `key` into [0] and [0, 0] when `hit`. */
function train(
  policy: AdaptiveTreePolicy,
  family: TreeFamily,
  fixed: number,
  perWork: number,
  hit: (node: number) => boolean,
  key = 'k',
  heads = 4,
): void {
  const tree = family.full.tree
  for (let i = 0; i < 40; i++) {
    // A plain step now and then, as the engine's plain decoding records them: trees are judged against it.
    if (i % 4 === 0) policy.recordStep(1, fixed + perWork, false)
    const work = i % 2 === 0 ? 1 + heads : 26 + 5 * heads
    policy.recordStep(work, fixed + perWork * work)
    for (const [node, child] of [
      [0, 1],
      [1, 9],
    ] as const) {
      const next = hit(child) ? child : -1
      policy.recordChildren(key, family.full, node, tree.size, next)
      if (next < 0) break
    }
  }
}

t.test(
  'the policy: full tree while it learns, plain when steps cost per token, deep when they cost per step',
  async (t) => {
    const heads = 4
    const fresh = onePolicy()
    t.equal(fresh.choose(1, 4, heads), 25, 'no measurements: the full tree')

    const perToken = onePolicy()
    train(perToken.policy, perToken.family, 0.001, 1, () => false)
    t.equal(perToken.choose(1, 4, heads), 0, 'nothing accepted and costs per token: plain decoding')
    const askedAt = (n: number): number[] =>
      Array.from({ length: n }, () => perToken.wantsHeads()).flatMap((ask, i) => (ask ? [i] : []))
    // No tree can pay even with optimistic acceptance: the heads are asked only once the try's
    // cost (a heads step and a small tree, in plain steps) is 1% of the plain steps between tries
    // (a few hundred: the heads run once per row, so a try costs about four plain steps).
    const asked = askedAt(2048)
    t.ok(asked.length >= 1 && asked.length <= 6, `plain rows skip the heads but for rare tries (${asked.join(', ')})`)
    t.ok(asked[0]! >= 255, `no try within the first 256 plain steps (first at ${asked[0]})`)
    t.equal(perToken.choose(1, 4, heads), 1, 'back with a draft: one small tree to refresh the estimates')
    t.ok(perToken.wantsHeads(), 'a tree was chosen: heads again')
    t.equal(perToken.choose(1, 4, heads), 0, 'plain again')
    t.notOk(askedAt(64).length > 0, 'and headless again')

    // A tree that might pay: the top candidate accepted every other walk (40 walks), steps
    // costing 1 ms + 0.21 ms per unit of work (the smallest tree: 2 tokens and the 2 heads its
    // next draft needs). The estimate says plain, the optimistic one (a standard deviation more
    // acceptance) says the smallest tree would win a few percent: tries come back after stretches
    // that double with each plain decision.
    const unsure = onePolicy()
    const { tree } = unsure.family.full
    for (let i = 0; i < 40; i++) {
      if (i % 4 === 0) unsure.policy.recordStep(1, 1.21, false)
      const work = i % 2 === 0 ? 1 + heads : 26 + 5 * heads
      unsure.policy.recordStep(work, 1 + 0.21 * work)
      unsure.policy.recordChildren('k', unsure.family.full, 0, tree.size, i % 2 === 0 ? 1 : -1)
    }
    t.equal(unsure.choose(1, 1, heads), 0, 'a depth-1 draft accepted half the time: plain decoding')
    const stretches: number[] = []
    for (let i = 0; i < 6; i++) {
      stretches.push(Array.from({ length: 400 }, () => unsure.wantsHeads()).findIndex((x) => x) + 1)
      t.equal(unsure.choose(1, 1, heads), 1, `try ${i + 1}: the smallest tree`)
      unsure.choose(1, 1, heads) // plain again
    }
    t.ok(
      stretches[0]! <= 4 && stretches[1]! > stretches[0]! && stretches.every((n) => n > 0 && n < 400),
      `headless stretches start short and grow (${stretches.join(', ')})`,
    )
    // A try costs about one plain step here, and a gain of a few percent allows a quarter of it:
    // a few hundred steps (the key accepted 20 of 320 candidates it was offered, so its untried
    // nodes are expected to do about as badly: see KeyStats.q).
    t.ok(stretches.at(-1)! > 64, 'a small optimistic gain waits long between tries')

    const perStep = onePolicy()
    train(perStep.policy, perStep.family, 1, 0.001, () => true)
    const k = perStep.choose(1, 4, heads)
    t.ok(k >= 2, `fixed step cost and the chain always accepted: at least the chain of two (got ${k})`)
  },
)

/**
 * Trees of one candidate pay: it is accepted 3 walks in 5, its children never; steps cost 1 ms
 * plus 0.3 ms per unit of work beyond 3 (the 1-candidate tree: 2 tokens and 2 heads).
 */
function trainOneCandidate(one: ReturnType<typeof onePolicy>): void {
  const { tree } = one.family.full
  for (let i = 0; i < 60; i++) {
    one.policy.recordStep(1, 1, false)
    const work = [4, 5, 8, 28][i % 4]!
    one.policy.recordStep(work, 1 + 0.3 * (work - 3))
    const hit = i % 5 < 3
    one.policy.recordChildren('k', one.family.full, 0, tree.size, hit ? 1 : -1)
    if (hit) one.policy.recordChildren('k', one.family.full, 1, tree.size, -1)
  }
}

t.test('a probe of plain decoding decodes plainly: its step runs no heads, so plain steps get measured', async (t) => {
  // Trees of one candidate pay: the policy picks k = 1, and every 32nd decision probes the
  // smaller neighbour, plain decoding.
  const one = onePolicy()
  trainOneCandidate(one)
  const choices: number[] = []
  for (let i = 0; i < 64 && !choices.includes(0); i++) {
    choices.push(one.choose(1, 4, 4))
    if (choices.at(-1) !== 0) t.ok(one.wantsHeads(), 'a tree: the heads run for the next draft')
  }
  t.equal(choices[0], 1, 'the smallest tree pays')
  t.equal(choices.at(-1), 0, `a probe chose plain decoding (decision ${choices.length})`)
  // Before, a probe's plain choice (no plain streak) let the heads run in its own step: the next
  // step had a draft and chose again, no step ever decoded plainly, and plain decoding's cost was
  // only ever extrapolated from tree steps.
  t.equal(one.policy.takeExplorationMs(), 0, 'no stretch computed yet: nothing to take off a step')
  t.notOk(one.wantsHeads(), "the probe's step decodes without heads")
  // That step computed the plain run's stretch (a cost fit per tree size); the engine takes the
  // time off the step's measured cost, so the one plain step measured is not costed as more.
  const ms = one.policy.takeExplorationMs()
  t.ok(ms > 0 && ms < 1000, `the stretch's computing time is handed over (${ms.toFixed(4)} ms)`)
  t.equal(one.policy.takeExplorationMs(), 0, 'and only once')
  t.ok(one.wantsHeads(), 'the step after it runs them, for the next draft')
  t.equal(one.policy.takeExplorationMs(), 0, 'the stretch was reused')
})

t.test('rows run only the heads their next tree can use: one level deeper than the last choice', async (t) => {
  const one = onePolicy()
  t.equal(one.policy.headsFor('k', 4), 4, 'before any choice (the warm-up starts from the full tree): all')
  t.equal(one.policy.headsFor('unknown', 3), 3, 'a key never seen: all')
  t.equal(one.choose(1, 4, 4), 25, 'warm-up: the full tree')
  t.equal(one.policy.headsFor('k', 4), 4, 'still all: the warm-up made no choice of its own')
  // The 1-candidate tree pays, and a probe picks plain.
  trainOneCandidate(one)
  const seen = new Map<number, number>()
  let deeper = true
  for (let i = 0; i < 64 && !seen.has(0); i++) {
    const k = one.choose(1, 2, 4)
    const heads = one.policy.headsFor('k', 4)
    seen.set(k, heads)
    // A probe's larger tree too: one level deeper than its own deepest node.
    if (k > 0) deeper &&= heads === Math.min(4, one.family.get(k).tree.maxDepth + 1)
    t.equal(one.policy.headsFor('k', 1), 1, 'never more than the speculator has')
  }
  t.equal(seen.get(1), 2, 'the 1-candidate tree (depth 1): heads 0 and 1')
  t.equal(seen.get(0), 1, 'plain decoding: one head, for the smallest tree a try takes')
  t.ok(deeper, `every tree chosen: its depth + 1 heads (${[...seen].map(([k, h]) => `k ${k}: ${h}`).join(', ')})`)
  // Headless drafters run none.
  t.equal(one.policy.headsFor('k', 0), 0)
})

t.test('a tree that only breaks even is not taken: plain decoding', async (t) => {
  // One candidate, accepted 13 walks in 20, in a step costing 1.62x a plain one (its work: 2
  // tokens and 2 heads): 1.65 tokens for 1.62 steps' time is 2% ahead on paper, inside the
  // estimates' noise (TREE_MARGIN). The same acceptance at 1.3x a plain step (27% ahead) is taken.
  const choose = (treeCost: number): number => {
    const one = onePolicy()
    const { tree } = one.family.full
    for (let i = 0; i < 60; i++) {
      one.policy.recordStep(1, 1, false)
      const work = [4, 5, 8, 28][i % 4]!
      one.policy.recordStep(work, treeCost + 0.3 * (work - 4))
      const hit = i % 20 < 13
      one.policy.recordChildren('k', one.family.full, 0, tree.size, hit ? 1 : -1)
      if (hit) one.policy.recordChildren('k', one.family.full, 1, tree.size, -1)
    }
    return one.choose(1, 4, 4)
  }
  t.equal(choose(1.62), 0, 'break-even: plain decoding')
  t.equal(choose(1.3), 1, 'a clear gain: the smallest tree')
})

t.test('hopeless keys in one step share the exploration budget: three keys try a third as often', async (t) => {
  const firstTry = (keys: number): number => {
    const one = onePolicy()
    train(one.policy, one.family, 0.001, 1, () => false)
    one.choose(1, 4, 4)
    return Array.from({ length: 4096 }, () => one.wantsHeads(keys)).findIndex((x) => x) + 1
  }
  const alone = firstTry(1)
  const shared = firstTry(3)
  t.ok(alone >= 255, `alone: the first try after ${alone} plain steps`)
  t.ok(shared >= 2.5 * alone, `one of three keys: after ${shared}`)
})

t.test('a key whose candidates are rarely accepted expects little of the nodes it has not tried', async (t) => {
  // Sampled rows under sample-and-match: a depth-1 candidate of rank r matches the sampled token
  // with chance 0.15, 0.08, 0.06, ... (about 0.5 for all 8 together); steps cost 0.35 ms + 0.04 per
  // unit of work. A prior of one half for untried nodes kept drawing the policy to trees of 8-23
  // nodes on untried ranks and depths (28 decisions in 3,000); with the key's own acceptance as
  // the prior it settles on plain decoding and single-candidate tries.
  const heads = 4
  const { policy, family, choose } = onePolicy()
  let seed = 1
  const rand = (): number => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648
  const chance = [0.15, 0.08, 0.06, 0.05, 0.04, 0.03, 0.03, 0.03, 0.02, 0.02]
  let large = 0
  let trees = 0
  for (let i = 0; i < 3000; i++) {
    const k = choose(1, 4, heads)
    if (k === 0) {
      policy.recordStep(1, 0.39, false)
      continue
    }
    const sub = family.get(k)
    const nodes = sub.tree.size
    policy.recordStep(nodes + heads, 0.35 + 0.04 * (nodes + heads))
    // Past the warm-up's cycle of sizes (12 tree steps), count the large trees.
    if (++trees > 12 && k >= 8) large++
    for (let node = 0; ;) {
      const u = rand()
      let sum = 0
      let next = -1
      for (const child of sub.tree.children[node]!) {
        sum += chance[sub.tree.rank[child]!] ?? 0.01
        if (u < sum) {
          next = child
          break
        }
      }
      policy.recordChildren('k', sub, node, nodes, next)
      if (next < 0) break
      node = next
    }
  }
  t.ok(large <= 8, `trees of 8 or more candidates after the warm-up: ${large} of ${trees}`)
})

t.test('the policy per key: adapter traffic never changes what base rows get', async (t) => {
  const heads = 4
  const make = (): TreeFamily => new TreeFamily(new MedusaTree(DEFAULT_MEDUSA_CHOICES), DEFAULT_MEDUSA_CHOICES)
  const alone = new AdaptiveTreePolicy()
  const mixed = new AdaptiveTreePolicy()
  const base = 'base|heads'
  const lora = 'kjv|heads'
  const aloneFamily = alone.family(base, make)
  const mixedFamily = mixed.family(base, make)
  const loraFamily = mixed.family(lora, make)
  // The same cost law for every step (a step's time is the step's), base heads always right, the
  // adapter's right one token ahead only: the mixed policy also sees adapter steps and walks.
  train(alone, aloneFamily, 1, 0.01, () => true, base)
  train(mixed, mixedFamily, 1, 0.01, () => true, base)
  train(mixed, loraFamily, 1, 0.01, (n) => n === 1, lora)
  const group = (key: string) => ({ key, rows: 1, depth: 4, heads })
  for (let i = 0; i < 40; i++) {
    const [k] = alone.choose([group(base)])
    const [kMixed] = mixed.choose([group(base)])
    t.equal(kMixed, k, `decision ${i}: the base key chooses as without adapter traffic`)
    if (k! === 0 || kMixed! === 0) break
  }
  t.ok(alone.choose([group(base)])[0]! >= 2, 'base heads that hit: a tree')
  t.same(
    [...aloneFamily.order],
    [...mixedFamily.order],
    'the base family keeps its own order (adapter walks re-rank only theirs)',
  )
  // One step with a row of each: no plain step of two rows measured yet, so it decodes plainly
  // (trees could only be judged against a plain cost extended from other sizes); once one is,
  // each key gets its own size, the adapter's shallower.
  t.same(mixed.choose([group(base), group(lora)]), [0, 0], 'two rows, no plain step of two measured: plain')
  mixed.recordStep(2, 1.02, false, 2)
  const [kBase, kLora] = mixed.choose([group(base), group(lora)])
  const depthOf = (family: TreeFamily, k: number): number => family.get(k).tree.maxDepth
  t.ok(kLora! >= 1, `the adapter row speculates (${kLora})`)
  t.ok(
    depthOf(mixedFamily, kBase!) > depthOf(loraFamily, kLora!),
    `the base row's tree is deeper (${depthOf(mixedFamily, kBase!)} vs ${depthOf(loraFamily, kLora!)})`,
  )
})

t.test('the policy keeps a bounded number of keys (LRU)', async (t) => {
  const policy = new AdaptiveTreePolicy(3)
  const make = (): TreeFamily => new TreeFamily(new MedusaTree([[0], [0, 0]]), [[0], [0, 0]])
  const first = policy.family('a', make)
  for (const key of ['b', 'c', 'a', 'd', 'e']) policy.family(key, make)
  t.equal(policy.keyCount, 3, 'never more than maxKeys')
  t.not(policy.family('b', make), undefined)
  t.equal(policy.family('e', make), policy.family('e', make), 'a held key keeps its family')
  t.not(policy.family('a', make), first, 'a forgotten key starts again')
  policy.recordChildren('gone', first.full, 0, 3, 1) // a key forgotten mid-step: ignored
  t.throws(() => new AdaptiveTreePolicy(0), /maxKeys/)
})

t.test('the whole step: per-token costs at batch 8 switch speculation off unless it pays', async (t) => {
  const heads = 4
  const key = 'base|heads'
  // Step time 1 ms + 0.2 ms per token of work: batch 1 pays, batch 8's tokens dominate. A fresh,
  // identically trained policy per question (a plain choice is followed by a forced small tree).
  const trained = (): AdaptiveTreePolicy => {
    const { policy, family } = onePolicy()
    train(
      policy,
      policy.family(key, () => family),
      1,
      0.2,
      (n) => n === 1,
      key,
    )
    return policy
  }
  const group = (rows: number) => ({ key, rows, depth: 4, heads })
  t.ok(trained().choose([group(1)])[0]! >= 1, 'batch 1: a small tree pays')
  t.equal(trained().choose([group(8)])[0], 0, 'batch 8: the step costs per token, the tree does not pay')
  t.equal(trained().choose([group(1)], 7)[0], 0, 'one speculating row among 7 plain ones: it would slow them')
})

t.test('steady state at batch 8 with the demo model costs: no speculative work; batch 1 keeps its trees', async (t) => {
  // The demo model on the CPU runtime (fits measured by plugins/backend-cuda-native/bench): a step
  // costs about 0.35 ms + 0.05 ms per unit of work (a token fed or a head run), ±20% noise; its
  // heads extend the greedy chain with a 0.9 chance per depth. At batch 1 the chain pays (about
  // 4 tokens for twice a plain step); at batch 8 no tree can, however lucky the heads.
  const heads = 4
  const key = 'base|heads'
  const policy = new AdaptiveTreePolicy()
  const family = policy.family(
    key,
    () => new TreeFamily(new MedusaTree(DEFAULT_MEDUSA_CHOICES), DEFAULT_MEDUSA_CHOICES),
  )
  const full = family.full.tree
  const chain = [0, 1, 2, 3, 4].map((d) => full.nodeOf.get(Array(d).fill(0).join(','))!)
  chain[0] = 0
  let seed = 12345
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) % 2147483648
    return seed / 2147483648
  }
  const stepMs = (work: number): number => (0.35 + 0.05 * work) * (0.8 + 0.4 * random())
  let draft = false
  // The heads run for the next draft, as many as the policy asks for (`headsFor`): the draft's depth.
  let depth = heads
  /** `steps` steps of `rows` rows: how many ran heads or trees, and their cost beyond plain steps' (a share). */
  const run = (rows: number, steps: number) => {
    let speculative = 0
    let trees = 0
    let extra = 0
    let plain = 0
    let firstTree = -1
    for (let i = 0; i < steps; i++) {
      const k = draft ? policy.choose([{ key, rows, depth, heads }])[0]! : 0
      let work: number
      if (k > 0) {
        const sub = family.get(k)
        for (let r = 0; r < rows; r++) {
          for (let node = 0, d = 0; ; d++) {
            let next = -1
            for (const c of sub.tree.children[node]!) if (sub.fullNode[c] === chain[d + 1] && random() < 0.9) next = c
            policy.recordChildren(key, sub, node, sub.tree.size, next)
            if (next < 0) break
            node = next
          }
        }
        depth = policy.headsFor(key, heads)
        work = rows * (sub.tree.size + depth)
        draft = true
        trees++
        if (firstTree < 0) firstTree = i
      } else {
        draft = policy.wantsDraft(key, rows, 0)
        if (draft) depth = policy.headsFor(key, heads)
        work = rows * (draft ? 1 + depth : 1)
      }
      if (work > rows) speculative++
      policy.recordStep(work, stepMs(work), k > 0, rows)
      extra += 0.05 * (work - rows)
      plain += 0.35 + 0.05 * rows
    }
    return { speculative, trees, share: extra / plain, firstTree }
  }
  run(1, 300)
  const one = run(1, 200)
  t.ok(one.trees >= 140, `batch 1: trees on most steps (${one.trees} of 200)`)
  run(8, 1000)
  const eight = run(8, 2000)
  // A try's heads step runs one head (`headsFor`), so the 1% budget below allows a few more of them.
  t.ok(eight.speculative <= 20, `batch 8: almost no step runs heads or trees (${eight.speculative} of 2000)`)
  t.ok(
    eight.share < 0.015,
    `batch 8: speculative work under 1.5% of plain decoding (${(eight.share * 100).toFixed(2)}%)`,
  )
  const back = run(1, 200)
  t.ok(back.firstTree >= 0 && back.firstTree < 40, `back at batch 1: a tree within 40 steps (at ${back.firstTree})`)
  t.ok(back.trees >= 120, `and trees on most steps again (${back.trees} of 200)`)
})

t.test('adaptive trees keep greedy output identical over many steps', async (t) => {
  for (const accuracy of [
    [1, 1, 1, 1],
    [0.9, 0.6, 0.4, 0.2],
    [0, 0, 0, 0],
  ]) {
    const { engine, runner } = await startEngine({ medusaAccuracy: accuracy }, {}, undefined, {
      speculation: { adaptive: true },
    })
    const medusa = await engine.loadAdapter(localMedusa('heads'))
    const prompts = Array.from({ length: 4 }, (_, i) => [i + 2, 3 * i + 1, 5, 8 + i])
    const results = await Promise.all(
      prompts.map((p) => collect(engine.submit(makeRequest({ inputIds: p, maxNewTokens: 60, speculator: medusa })))),
    )
    prompts.forEach((p, i) => t.same(idsOf(results[i]!), fakeGreedy(p, -1, V, 60), `heads ${accuracy}: request ${i}`))
    t.same(runner.violations, [])
    await engine.close()
  }
})

/**
 * One prompt-lookup row decoding alone, driven through the policy's two questions as the
 * scheduler asks them: `wantsDraft` before it searches, `choose` when a draft exists. A step
 * costs `stepMs(work, i)`; a chain node is accepted when `accepts(depth, i)`. Returns each step's
 * tree size (0: plain) and whether the row searched.
 */
function driveLookup(
  steps: number,
  stepMs: (work: number, i: number) => number,
  accepts: (depth: number, i: number) => boolean,
): { ks: number[]; searched: boolean[] } {
  const policy = new AdaptiveTreePolicy()
  const family = policy.family('base|prompt-lookup', () => lookupFamily(lookupTree(4)))
  const ks: number[] = []
  const searched: boolean[] = []
  for (let i = 0; i < steps; i++) {
    const search = policy.wantsDraft('base|prompt-lookup')
    const k = search ? policy.choose([{ key: 'base|prompt-lookup', rows: 1, depth: 4, heads: 0 }])[0]! : 0
    ks.push(k)
    searched.push(search)
    policy.recordStep(1 + k, stepMs(1 + k, i), k > 0)
    if (k === 0) continue
    const sub = family.get(k)
    for (let node = 0; node < k; node++) {
      const next = accepts(node + 1, i) ? node + 1 : -1
      policy.recordChildren('base|prompt-lookup', sub, node, k + 1, next)
      if (next < 0) break
    }
  }
  return { ks, searched }
}

t.test('prompt lookup: a key whose first trees ran cold and missed tries again, and finds its trees', async (t) => {
  // The first 40 steps: trees cost 1 ms per unit of work (cold code) and nothing matches (the
  // text has not repeated yet). Then the demo model's warm costs (0.35 ms + 0.05 per extra
  // token) and text that repeats: three of four chain nodes accepted.
  const cold = 40
  const { ks } = driveLookup(
    3000,
    (work, i) => (i < cold && work > 1 ? work : 0.35 + 0.05 * (work - 1)),
    (depth, i) => i >= cold && depth <= 3,
  )
  const late = ks.slice(2000)
  const trees = late.filter((k) => k >= 3).length
  t.ok(trees > 0.8 * late.length, `the last 1000 steps: ${trees} chains of 3-4 (was plain for good)`)
})

t.test('prompt lookup: while no tree pays, rows seldom search', async (t) => {
  // Steps cost per token and nothing is ever accepted.
  const { searched } = driveLookup(
    4000,
    (work) => 0.35 * work,
    () => false,
  )
  const late = searched.slice(1000)
  const n = late.filter(Boolean).length
  t.ok(n > 0, `it still tries now and then (${n} searches in 3000 steps)`)
  t.ok(n <= 0.02 * late.length, `searches on at most 2% of the steps (${n} of ${late.length})`)
})
