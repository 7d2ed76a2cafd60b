// Greedy-leaf Medusa rows (StepRow.medusaLeaf): the runner walks the row's tree by argmax and runs
// the heads only at the node where the walk stops; the heads there equal asking medusaIndices
// for that node.
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import type { MedusaWeights, StepRow } from '@loom/core'
import { buildModel } from '@loom/testkit'
import { NativeStepRunner } from '../src/index.ts'
import { relError } from './helpers.ts'

t.test('greedy leaf: the walk stops where argmax leaves the tree; heads as if asked there', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-leaf-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await buildModel(dir, { arch: 'llama', hiddenSize: 64, numLayers: 2, seed: 33 })
  const open = async (): Promise<NativeStepRunner> => {
    const r = new NativeStepRunner(dir, { threads: 2, kv_cache_tokens: 256, kv_block_size: 4 })
    t.teardown(() => r.close())
    await r.load()
    return r
  }
  const [a, b, c] = [await open(), await open(), await open()]
  const spec = await a.load()
  const V = spec.vocabSize
  const H = spec.hiddenSize
  const heads: MedusaWeights = {
    kind: 'medusa',
    key: 'leaf',
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
  const blocks = Int32Array.from({ length: 16 }, (_, i) => i)
  const prompt = [5, 11, 19, 3, 42]
  const row = (tokens: number[], cacheLen: number, extra: Partial<StepRow> = {}): StepRow => ({
    seqId: 1,
    tokens: Int32Array.from(tokens),
    positions: Int32Array.from(tokens, (_, i) => cacheLen + i),
    cacheLen,
    blockTable: blocks,
    loraSlot: -1,
    logitIndices: Int32Array.of(tokens.length - 1),
    medusaSlot: -1,
    medusaIndices: new Int32Array(0),
    ...extra,
  })
  const argmax = (x: Float32Array): number => x.indexOf(Math.max(...x))
  // Greedy continuation from runner c: r follows the prompt, then a1 and a2.
  const r = argmax((await c.step({ rows: [row(prompt, 0)], kvCopies: [] })).logits)
  const a1 = argmax((await c.step({ rows: [row([r], prompt.length)], kvCopies: [] })).logits)
  const a2 = argmax((await c.step({ rows: [row([a1], prompt.length + 1)], kvCopies: [] })).logits)
  for (const x of [a, b]) await x.step({ rows: [row(prompt, 0)], kvCopies: [] })

  const cases: { name: string; tokens: number[]; mask?: Uint8Array; depth?: number[]; leaf: number }[] = [
    // A chain (causal): r, a1, then a token that is not a2: the walk stops at a1 (node 1).
    { name: 'chain', tokens: [r, a1, (a2 + 1) % V], leaf: 1 },
    // A tree: node 1 a wrong child of the root, node 2 = a1 (child of the root), node 3 = a2
    // (child of node 2): the walk goes root -> 2 -> 3.
    {
      name: 'tree',
      tokens: [r, (a1 + 1) % V, a1, a2],
      mask: Uint8Array.from([1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1]),
      depth: [0, 1, 1, 2],
      leaf: 3,
    },
  ]
  const L = prompt.length
  for (const cs of cases) {
    const all = Int32Array.from(cs.tokens, (_, i) => i)
    const base = {
      logitIndices: all,
      medusaSlot: slots[0]!,
      ...(cs.mask ? { treeMask: cs.mask } : {}),
      ...(cs.depth ? { positions: Int32Array.from(cs.depth, (d) => L + d) } : {}),
    }
    const out = await a.step({
      rows: [row(cs.tokens, L, { ...base, medusaLeaf: true })],
      kvCopies: [],
      medusaTopK: 4,
    })
    t.equal(out.medusaLeaves?.[0], cs.leaf, `${cs.name}: the walk stops at node ${cs.leaf}`)
    t.equal(out.medusaLogits.length, 3 * V, `${cs.name}: one head block`)
    for (let h = 0; h < 3; h++) {
      const headRow = out.medusaLogits.subarray(h * V, (h + 1) * V)
      t.equal(out.medusaTopIds?.[h * 4], argmax(headRow), `${cs.name}: head ${h} top-1`)
      const best4 = Array.from(headRow.keys())
        .sort((x, y) => headRow[y]! - headRow[x]! || x - y)
        .slice(0, 4)
      t.same(Array.from(out.medusaTopIds?.subarray(h * 4, h * 4 + 4) ?? []), best4, `${cs.name}: head ${h} top-4`)
    }
    const asked = await b.step({
      rows: [row(cs.tokens, L, { ...base, medusaSlot: slots[1]!, medusaIndices: Int32Array.of(cs.leaf) })],
      kvCopies: [],
    })
    t.ok(relError(out.medusaLogits, asked.medusaLogits) <= 1e-6, `${cs.name}: heads equal medusaIndices [${cs.leaf}]`)
  }
  // A greedy-leaf row must ask for every token's logits and no medusaIndices.
  await t.rejects(
    a.step({ rows: [row([r, a1], L, { medusaSlot: slots[0]!, medusaLeaf: true })], kvCopies: [] }),
    { code: 'native_error', message: /greedy-leaf row/ },
    'a leaf row with one logits row is refused',
  )
})
