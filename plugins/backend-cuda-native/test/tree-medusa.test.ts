// Medusa support: tree-masked candidate rows, kvCopies compaction before the forward pass, and
// Medusa heads (version 2 reuses the base lm_head; version 1 brings its own). Steps return greedy
// tokens with their top-20 logprobs, the tree's walk end and each head's best ids, never logits:
// each is held to the f64 reference (`relErrorTop`, `relErrorTopIds`).
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import type { MedusaWeights } from '@loom/core'
import { buildModel, ReferenceModel } from '@loom/testkit'
import { NativeStepRunner } from '../src/index.ts'
import {
  batchOf,
  blockAllocator,
  GREEDY_TOP,
  relErrorTop,
  relErrorTopIds,
  sampledPositions,
  TestSequence,
} from './helpers.ts'

/** Best ids per head the Medusa steps ask for. */
const DRAFT_K = 8

t.test('tree mask, kvCopies and Medusa heads', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-tree-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await buildModel(dir, { arch: 'llama', hiddenSize: 64, numLayers: 2, seed: 8 })
  const ref = await ReferenceModel.load(dir)
  const runner = new NativeStepRunner(dir, { threads: 2, kv_cache_tokens: 256, kv_block_size: 4 })
  t.teardown(() => runner.close())
  const spec = await runner.load()
  const V = spec.vocabSize
  const H = spec.hiddenSize
  const seq = new TestSequence(1, spec.kvBlockSize, blockAllocator(spec.kvBlockCount))
  const prompt = [4, 8, 15, 16, 23]
  await runner.step(batchOf([seq.row(prompt)]))

  // Tree: root r, child c1, two siblings s1 and s2 under c1; positions by depth. c1 and s2 are the
  // reference's greedy tokens after r and c1, so the walk should go root -> c1 -> s2.
  const argmax = (x: Float64Array): number => x.indexOf(Math.max(...x))
  const greedy = ref.newSequence()
  greedy.forward(prompt)
  const r = 42
  const c1 = argmax(greedy.forward([r])[0]!)
  const s2 = argmax(greedy.forward([c1])[0]!)
  const s1 = (s2 + 1) % V
  const c = seq.cacheLen
  const mask = Uint8Array.from([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 0, 1])
  while (seq.blocks.length * spec.kvBlockSize < c + 4) seq.blocks.push(seq.blocks.length + 50)
  const tree = await runner.step(
    batchOf([
      {
        seqId: 1,
        tokens: Int32Array.of(r, c1, s1, s2),
        positions: Int32Array.of(c, c + 1, c + 2, c + 2),
        cacheLen: c,
        blockTable: Int32Array.from(seq.blocks),
        treeMask: mask,
        loraSlot: -1,
        sampling: GREEDY_TOP,
        scoreTargets: new Int32Array(0),
        medusaSlot: -1,
        medusaHeads: 0,
      },
    ]),
  )
  const branch1 = ref.newSequence()
  branch1.forward(prompt)
  const branch2 = branch1.clone()
  const e1 = branch1.forward([r, c1, s1])
  const e2 = branch2.forward([r, c1, s2])
  const nodes = sampledPositions(tree)
  t.equal(nodes.length, 4, 'every node sampled')
  let worst = 0
  for (const [i, exp] of [e1[0]!, e1[1]!, e1[2]!, e2[2]!].entries())
    worst = Math.max(worst, relErrorTop(nodes[i]!, exp))
  t.ok(worst <= 1e-4, `tree logprobs match each branch (${worst.toExponential(2)})`)
  t.same(
    nodes.map((n) => n.token),
    [c1, s2, argmax(e1[2]!), argmax(e2[2]!)],
    'greedy tokens are the reference argmax',
  )
  t.same(Array.from(tree.walkEnds), [3], 'the walk goes root -> c1 -> s2')

  // Accept r, c1, s2: move cache entry c+3 to c+2, then decode one token after it.
  seq.cacheLen = c + 3
  const next = 9
  const row = seq.row([next])
  const after = await runner.step({
    ...batchOf([row]),
    kvCopies: [{ blockTable: Int32Array.from(seq.blocks), from: Int32Array.of(c + 3), to: Int32Array.of(c + 2) }],
  })
  const exp = branch2.forward([next])[0]!
  t.ok(relErrorTop(sampledPositions(after)[0]!, exp) <= 1e-4, 'decode after compaction sees the accepted branch')

  // Medusa v2 (base lm_head) with W = 0: head logits = lm_head(x + silu(b)) = base + lm_head·silu(b);
  // each head's DRAFT_K best ids must be those logits' best.
  const lmHead = ref.weight(ref.config.tie_word_embeddings ? 'model.embed_tokens.weight' : 'lm_head.weight')
  const bias = Float32Array.from({ length: H }, (_, i) => Math.sin(i) * 0.5)
  const medusa: MedusaWeights = {
    kind: 'medusa',
    key: 'medusa-v2',
    numHeads: 2,
    numLayers: 1,
    heads: [
      { blocks: [{ weight: new Float32Array(H * H), bias: new Float32Array(H) }] },
      { blocks: [{ weight: new Float32Array(H * H), bias }] },
    ],
  }
  const mslot = await runner.loadAdapter(medusa)
  const m = await runner.step(batchOf([seq.row([11], { medusaSlot: mslot, medusaHeads: 2 })], DRAFT_K))
  t.equal(m.draftIds.length, 2 * DRAFT_K, '[heads, draftTopK] ids')
  const base = branch2.forward([11])[0]!
  const head0 = m.draftIds.subarray(0, DRAFT_K)
  t.ok(relErrorTopIds(head0, base) <= 1e-4, `zero head ranks as the base logits: ${head0}`)
  t.same(Array.from(head0), Array.from(m.topIds.subarray(0, DRAFT_K)), "zero head's ids are the row's top ids")
  const silu = Array.from(bias, (b) => b / (1 + Math.exp(-b)))
  const shifted = Float64Array.from(base, (v, o) => {
    let s = 0
    for (let i = 0; i < H; i++) s += lmHead[o * H + i]! * silu[i]!
    return v + s
  })
  const head1 = m.draftIds.subarray(DRAFT_K)
  t.ok(relErrorTopIds(head1, shifted) <= 1e-4, `bias, SiLU residual and base lm_head: ${head1}`)
  t.notSame(Array.from(head1), Array.from(head0), 'the bias moves the ranking')

  // Medusa v1 with its own lm_head (a copy of the base one) equals v2.
  await runner.unloadAdapter(mslot)
  const own = Float32Array.from(lmHead)
  const v1 = await runner.loadAdapter({
    ...medusa,
    key: 'medusa-v1',
    heads: medusa.heads.map((h) => ({ ...h, lmHead: own })),
  })
  const m1 = await runner.step(batchOf([seq.row([12], { medusaSlot: v1, medusaHeads: 2 })], DRAFT_K))
  const base1 = branch2.forward([12])[0]!
  t.ok(relErrorTopIds(m1.draftIds.subarray(0, DRAFT_K), base1) <= 1e-4, 'own lm_head (version 1)')
  const shifted1 = Float64Array.from(base1, (v, o) => {
    let s = 0
    for (let i = 0; i < H; i++) s += lmHead[o * H + i]! * silu[i]!
    return v + s
  })
  t.ok(relErrorTopIds(m1.draftIds.subarray(DRAFT_K), shifted1) <= 1e-4, 'own lm_head after the residual (version 1)')
})
