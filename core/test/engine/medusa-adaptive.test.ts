import t from 'tap'
import { draftFromHeads } from '../../src/engine/medusa/draft.ts'
import { DEFAULT_MEDUSA_CHOICES, MedusaTree } from '../../src/engine/medusa/medusa-tree.ts'
import { TreeFamily } from '../../src/engine/medusa/tree-family.ts'
import { AdaptiveTreePolicy } from '../../src/engine/medusa/tree-policy.ts'
import { headSpacing } from '../../src/engine/row-builder.ts'
import { fakeGreedy } from './fake-step-runner.ts'
import { collect, idsOf, localMedusa, makeRequest, startEngine } from './engine-fixtures.ts'

const V = 64

t.test('head nodes: the root and the rank-0 chain; every node maps to its deepest one', async (t) => {
  const tree = new MedusaTree([[1], [0], [0, 0], [1, 0], [0, 1], [0, 0, 0]])
  // Sorted: 1 [0], 2 [1], 3 [0,0], 4 [0,1], 5 [1,0], 6 [0,0,0]
  t.same([...tree.headNodes], [0, 1, 3, 6])
  t.same([...tree.headAncestor], [0, 1, 0, 3, 1, 0, 6])
  t.equal(tree.headNodesWithin(4), 3)
  t.equal(tree.headNodesWithin(1), 1)
  t.equal(tree.nodeOf.get('0,1'), 4)
  t.equal(tree.paths[5], '1,0')
})

t.test('head spacing: heads at every g-th chain node keep drafts as deep as the tree', async (t) => {
  t.equal(headSpacing(4, 4), 1)
  t.equal(headSpacing(4, 3), 2)
  t.equal(headSpacing(4, 2), 3)
  t.equal(headSpacing(4, 1), 4)
  t.equal(headSpacing(2, 4), 1, 'fewer heads than the tree is deep: every chain node')
})

t.test('a shifted draft uses the later heads and is shallower', async (t) => {
  const tree = new MedusaTree([[0], [0, 0]])
  const logits = new Float32Array(3 * 4)
  logits.set([9, 0, 0, 0], 0) // head 0: 0
  logits.set([0, 9, 0, 0], 4) // head 1: 1
  logits.set([0, 0, 9, 0], 8) // head 2: 2
  const plain = draftFromHeads(tree, 3, logits, 0, 4)
  t.same([...plain.tokens], [0, 0, 1])
  const shifted = draftFromHeads(tree, 3, logits, 0, 4, 1)
  t.same([...shifted.tokens], [0, 1, 2])
  t.equal(shifted.depth, 2)
  t.equal(draftFromHeads(tree, 3, logits, 0, 4, 2).depth, 1)
  t.equal(draftFromHeads(tree, 3, logits, 0, 4, 3).depth, 0, 'no heads left: no draft')
})

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

t.test(
  'the policy: full tree while it learns, plain when steps cost per token, deep when they cost per step',
  async (t) => {
    const tree = new MedusaTree(DEFAULT_MEDUSA_CHOICES)
    const family = new TreeFamily(tree, DEFAULT_MEDUSA_CHOICES)
    const heads = 4
    const train = (
      policy: AdaptiveTreePolicy,
      fixed: number,
      perWork: number,
      hit: (node: number) => boolean,
    ): void => {
      for (let i = 0; i < 40; i++) {
        const work = i % 2 === 0 ? 1 + heads : 26 + 5 * heads
        policy.recordStep(work, fixed + perWork * work)
        // The walk from the root: into child 1 ([0]) then 9 ([0, 0]) when `hit` says so.
        for (const [node, child] of [
          [0, 1],
          [1, 9],
        ] as const) {
          const next = hit(child) ? child : -1
          policy.recordChildren(family.full, node, tree.size, next)
          if (next < 0) break
        }
      }
    }
    const fresh = new AdaptiveTreePolicy(family)
    t.equal(fresh.choose(1, 4, heads), 25, 'no measurements: the full tree')

    const perToken = new AdaptiveTreePolicy(family)
    train(perToken, 0.001, 1, () => false)
    t.equal(perToken.choose(1, 4, heads), 0, 'nothing accepted and costs per token: plain decoding')
    const askedAt = (n: number): number[] =>
      Array.from({ length: n }, () => perToken.wantsHeads()).flatMap((ask, i) => (ask ? [i] : []))
    t.same(askedAt(4), [1, 3], 'then plain rows skip the heads, asking every 2nd step at first')
    t.equal(perToken.choose(1, 4, heads), 1, 'back with a draft: one small tree to refresh the estimates')
    t.ok(perToken.wantsHeads(), 'a tree was chosen: heads again')
    // The model keeps saying plain: each headless stretch doubles, up to 16 steps.
    const stretches: number[] = []
    for (let i = 0; i < 5; i++) {
      t.equal(perToken.choose(1, 4, heads), 0, `plain again (${i + 1})`)
      stretches.push(askedAt(40)[0]! + 1)
      perToken.choose(1, 4, heads) // the forced small tree after a headless stretch
    }
    // (The forced small tree's decision was plain by the model too: the streak grows by two a round.)
    t.same(stretches, [8, 16, 16, 16, 16], 'headless stretches double up to 16 steps')

    const perStep = new AdaptiveTreePolicy(family)
    train(perStep, 1, 0.001, () => true)
    const k = perStep.choose(1, 4, heads)
    t.ok(k >= 2, `fixed step cost and the chain always accepted: at least the chain of two (got ${k})`)
  },
)

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
