import t from 'tap'
import type { GeneratedToken } from '../../src/contracts/backend.ts'
import { MedusaTree } from '../../src/engine/medusa/medusa-tree.ts'
import { branchCompaction, walkVerification, type Sampled } from '../../src/engine/medusa/verify.ts'

// Sorted: 0 root, 1 [0], 2 [1], 3 [0,0], 4 [0,1], 5 [1,0], 6 [0,0,0]
const tree = new MedusaTree([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
const rowTokens = Int32Array.of(50, 10, 11, 20, 21, 22, 30)
const token = (id: number): GeneratedToken => ({ id, logprob: -1, skipped: false })

/** A walk where node `n` samples `sampled[n]`. */
const walk = (sampled: readonly (number | 'done' | 'none')[], nodes = tree.size, stopAt = -1) => {
  const moves: [number, number][] = []
  const result = walkVerification(
    tree,
    nodes,
    rowTokens,
    (n): Sampled => {
      const s = sampled[n]!
      return typeof s === 'number' ? token(s) : s
    },
    (id) => (id === stopAt ? 'eos_token' : null),
    (n, next) => moves.push([n, next]),
  )
  return { ...result, moves }
}

t.test('the walk follows the child carrying each sampled token', async (t) => {
  // Root samples 11 (node 2), node 2 samples 22 (node 5), node 5 samples 99 (no child): stop at 5.
  const w = walk([11, 0, 22, 0, 0, 99, 0])
  t.same(w.accepted, [2, 5])
  t.equal(w.node, 5)
  t.equal(w.ending, null)
  t.same(
    w.emitted.map((e) => [e.id, e.skipped]),
    [
      [11, false],
      [22, true],
      [99, true],
    ],
    'the first token as usual, the accepted extra ones skipped',
  )
  t.same(w.moves, [
    [0, 2],
    [2, 5],
    [5, -1],
  ])
})

t.test('nodes past the row are never followed; stop rules end the walk inside the branch', async (t) => {
  // Node 6 (rank path [0,0,0]) is outside a 6-node row: the walk stops at node 3.
  t.same(walk([10, 20, 0, 30, 0, 0, 0], 6).accepted, [1, 3])
  const w = walk([10, 20, 0, 30, 0, 0, 0], tree.size, 20)
  t.same(w.accepted, [1], 'eos sampled at node 1: node 3 is not taken')
  t.equal(w.ending, 'eos_token')
  t.same(
    w.emitted.map((e) => e.id),
    [10, 20],
  )
})

t.test('done and none end the walk after the tokens already chosen', async (t) => {
  const done = walk([10, 'done', 0, 0, 0, 0, 0])
  t.equal(done.ending, 'eos_token')
  t.same(
    done.emitted.map((e) => e.id),
    [10],
  )
  const none = walk(['none', 0, 0, 0, 0, 0, 0])
  t.equal(none.ending, 'none')
  t.same(none.emitted, [])
})

t.test('compaction moves accepted nodes into their branch places', async (t) => {
  t.same(branchCompaction(100, [2, 5]), { from: [102, 105], to: [101, 102] })
  t.same(branchCompaction(100, [1, 3]), { from: [103], to: [102] })
  t.equal(branchCompaction(7, []), null, 'nothing accepted: nothing to move')
  t.equal(branchCompaction(7, [1, 2, 3]), null, 'a chain prefix is in place')
})
