// Verification rows (a tree mask, sampled at every node): the runner walks the tree with the tokens
// it chose (from the root, to the first child whose token is the node's choice, until none is),
// returns where the walk ends (`StepOutput.walkEnds`) and runs the row's Medusa heads there
// (`draftIds`). For greedy and for seeded sampled rows: each node chooses what plain decoding
// chooses after the same path, the walk ends where a walk over the returned tokens ends, and the
// heads' best ids equal those of a causal row that feeds the accepted path (heads at its last token).
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import {
  GREEDY_ROW_SAMPLING,
  GREEDY_SAMPLING,
  type MedusaWeights,
  type RowSampling,
  type StepBatch,
  type StepRow,
} from '@loom/core'
import { buildModel } from '@loom/testkit'
import { NativeStepRunner } from '../src/index.ts'
import { causalMask } from './helpers.ts'

/** Best ids per head. */
const K = 4

/** The node a walk over `chosen` reaches in the tree `mask` (`[n, n]`) over `tokens`. */
function walk(tokens: Int32Array, mask: Uint8Array, chosen: ArrayLike<number>): number {
  const n = tokens.length
  const parent = (i: number): number => {
    for (let j = i - 1; j >= 0; j--) if (mask[i * n + j]) return j
    return -1
  }
  let node = 0
  for (;;) {
    let next = -1
    for (let c = node + 1; c < n && next < 0; c++) if (parent(c) === node && tokens[c] === chosen[node]) next = c
    if (next < 0) return node
    node = next
  }
}

t.test('walk end and heads there, greedy and seeded sampled rows', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-walk-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await buildModel(dir, { arch: 'llama', hiddenSize: 64, numLayers: 2, seed: 33 })
  const open = async (): Promise<NativeStepRunner> => {
    const r = new NativeStepRunner(dir, { threads: 2, kv_cache_tokens: 256, kv_block_size: 4 })
    t.teardown(() => r.close())
    await r.load()
    return r
  }
  // a: verification rows; b: the accepted paths as causal rows; c: plain decoding.
  const [a, b, c] = [await open(), await open(), await open()]
  const spec = await a.load()
  const V = spec.vocabSize
  const H = spec.hiddenSize
  const heads: MedusaWeights = {
    kind: 'medusa',
    key: 'walk',
    numHeads: 3,
    numLayers: 1,
    heads: [0, 1, 2].map((h) => ({
      blocks: [
        {
          weight: Float32Array.from({ length: H * H }, (_, i) => Math.sin(i * 0.37 + h) * 0.05),
          bias: Float32Array.from({ length: H }, (_, i) => Math.cos(i + h) * 0.2),
        },
      ],
    })),
  }
  const slots = [await a.loadAdapter(heads), await b.loadAdapter(heads)]
  const greedy = GREEDY_ROW_SAMPLING
  const row = (seqId: number, tokens: number[], cacheLen: number, extra: Partial<StepRow> = {}): StepRow => ({
    seqId,
    tokens: Int32Array.from(tokens),
    positions: Int32Array.from(tokens, (_, i) => cacheLen + i),
    cacheLen,
    // Sequence 1 in blocks 0..15, sequence 2 in 16..31.
    blockTable: Int32Array.from({ length: 16 }, (_, i) => (seqId - 1) * 16 + i),
    loraSlot: -1,
    sampling: greedy,
    scoreTargets: new Int32Array(0),
    medusaSlot: -1,
    medusaHeads: 0,
    ...extra,
  })
  const batch = (rows: StepRow[]): StepBatch => ({ rows, kvCopies: [], topLogprobs: 0, draftTopK: K })
  const prompt = [5, 11, 19, 3, 42]
  const other = [7, 7, 8, 100]
  const L = prompt.length
  const [root] = (await c.step(batch([row(1, prompt, 0)]))).tokens
  const r = root!
  for (const x of [a, b]) await x.step(batch([row(1, prompt, 0), row(2, other, 0)]))

  const modes: { name: string; sampling: (draws: number) => RowSampling }[] = [
    { name: 'greedy', sampling: () => greedy },
    {
      name: 'sampled',
      sampling: (draws) => ({ ...greedy, params: { ...GREEDY_SAMPLING, temperature: 1.5, seed: 2024n }, draws }),
    },
  ]
  const D = 5
  for (const mode of modes) {
    // Plain decoding after r: x1, then x2 (a sampled row's depth-d node draws after D + d draws).
    const [x1] = (await c.step(batch([row(1, [r], L, { sampling: mode.sampling(D) })]))).tokens
    const [x2] = (await c.step(batch([row(1, [x1!], L + 1, { sampling: mode.sampling(D + 1) })]))).tokens
    t.comment(`${mode.name}: r ${r}, then ${x1}, ${x2}`)
    const cases: {
      name: string
      tokens: number[]
      mask?: Uint8Array
      depth?: number[]
      end: number
      path: number[]
    }[] = [
      // A chain: r, x1, then a token that is not x2: the walk stops at x1 (node 1).
      { name: 'chain', tokens: [r, x1!, (x2! + 1) % V], end: 1, path: [0, 1] },
      // A tree: node 1 a wrong child of the root, node 2 = x1, node 3 = x2 (child of node 2).
      {
        name: 'tree',
        tokens: [r, (x1! + 1) % V, x1!, x2!],
        mask: Uint8Array.from([1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1]),
        depth: [0, 1, 1, 2],
        end: 3,
        path: [0, 2, 3],
      },
      // No child matches: the walk ends at the root, and the heads run there.
      { name: 'root', tokens: [r, (x1! + 1) % V, (x1! + 2) % V], end: 0, path: [0] },
    ]
    const draftsAt = new Map<number, number[]>()
    for (const cs of cases) {
      const name = `${mode.name} ${cs.name}`
      const mask = cs.mask ?? causalMask(cs.tokens.length)
      const verify = row(1, cs.tokens, L, {
        treeMask: mask,
        ...(cs.depth ? { positions: Int32Array.from(cs.depth, (d) => L + d) } : {}),
        sampling: mode.sampling(D),
        medusaSlot: slots[0]!,
        medusaHeads: 3,
      })
      // Beside it, a causal decode row of another sequence: no walk, no heads.
      const out = await a.step(batch([verify, row(2, [9], other.length)]))
      t.equal(out.tokens.length, cs.tokens.length + 1, `${name}: every node sampled, then the causal row`)
      const chosen = Array.from(out.tokens.subarray(0, cs.tokens.length))
      // Along the accepted path each node chooses what plain decoding chose there.
      t.same(
        cs.path.slice(0, 2).map((node) => chosen[node]),
        [x1, x2].slice(0, Math.min(2, cs.path.length)),
        `${name}: path nodes choose ${[x1, x2].slice(0, cs.path.length)}`,
      )
      t.equal(out.walkEnds[0], walk(verify.tokens, mask, chosen), `${name}: walkEnds is the walk over the tokens`)
      t.equal(out.walkEnds[0], cs.end, `${name}: the walk ends at node ${cs.end}`)
      t.equal(out.walkEnds[1], -1, `${name}: a causal row has no walk end`)
      t.equal(out.draftIds.length, 3 * K, `${name}: [heads, K] ids for the one row with heads`)
      const drafts = Array.from(out.draftIds)
      draftsAt.set(cs.end, drafts)
      // The accepted path fed causally, heads at its last token.
      const accepted = await b.step(
        batch([
          row(
            1,
            cs.path.map((node) => cs.tokens[node]!),
            L,
            { medusaSlot: slots[1]!, medusaHeads: 3 },
          ),
        ]),
      )
      t.same(drafts, Array.from(accepted.draftIds), `${name}: heads as at the accepted path's last token`)
      t.ok(
        drafts.every((id) => id >= 0 && id < V),
        `${name}: draft ids in the vocabulary`,
      )
    }
    // The heads see where the walk ended: different nodes, different drafts.
    t.notSame(draftsAt.get(0), draftsAt.get(1), `${mode.name}: drafts at the root and at node 1 differ`)
  }
})
