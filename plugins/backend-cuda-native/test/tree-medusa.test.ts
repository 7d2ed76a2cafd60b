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
  // Head 1's logits: the base logits plus lm_head · SiLU(bias) (its block's W is zero).
  const silu = Array.from(bias, (b) => b / (1 + Math.exp(-b)))
  const shiftedBy = (logits: Float64Array) =>
    Float64Array.from(logits, (v, o) => {
      let s = 0
      for (let i = 0; i < H; i++) s += lmHead[o * H + i]! * silu[i]!
      return v + s
    })
  const head1 = m.draftIds.subarray(DRAFT_K)
  t.ok(relErrorTopIds(head1, shiftedBy(base)) <= 1e-4, `bias, SiLU residual and base lm_head: ${head1}`)
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
  t.ok(
    relErrorTopIds(m1.draftIds.subarray(DRAFT_K), shiftedBy(base1)) <= 1e-4,
    'own lm_head after the residual (version 1)',
  )
  await runner.unloadAdapter(v1)

  // A draft vocabulary (FR-Spec): each head's best ids among those tokens only, for heads on the
  // base lm_head (rows gathered on the device) and with their own (gathered at load). It leaves
  // out the base logits' 3 best ids and every third id, so the ranking must change.
  const base2 = branch2.forward([13])[0]!
  const best3 = Array.from(base2.keys())
    .sort((a, b) => base2[b]! - base2[a]! || a - b)
    .slice(0, 3)
  const draftVocabulary = Int32Array.from(
    Array.from({ length: V }, (_, id) => id).filter((id) => id % 3 !== 1 && !best3.includes(id)),
  )
  const within = (ids: Int32Array, logits: Float64Array): number => {
    const index = new Map(Array.from(draftVocabulary, (id, i) => [id, i]))
    if (!Array.from(ids).every((id) => index.has(id))) return Infinity
    return relErrorTopIds(
      Array.from(ids, (id) => index.get(id)!),
      Array.from(draftVocabulary, (id) => logits[id]!),
    )
  }
  for (const [kind, heads] of [
    ['base lm_head', medusa.heads],
    ['own lm_head', medusa.heads.map((h) => ({ ...h, lmHead: own }))],
  ] as const) {
    const slot = await runner.loadAdapter({ ...medusa, key: `draft-${kind}`, heads, draftVocabulary })
    const logits = kind === 'base lm_head' ? base2 : branch2.forward([14])[0]!
    const d = await runner.step(
      batchOf([seq.row([kind === 'base lm_head' ? 13 : 14], { medusaSlot: slot, medusaHeads: 2 })], DRAFT_K),
    )
    const zero = d.draftIds.subarray(0, DRAFT_K)
    t.ok(within(zero, logits) <= 1e-4, `${kind}: head 0's best ids within the draft vocabulary: ${zero}`)
    t.ok(within(d.draftIds.subarray(DRAFT_K), shiftedBy(logits)) <= 1e-4, `${kind}: head 1 within the draft vocabulary`)
    if (kind === 'base lm_head') t.notOk(zero.includes(best3[0]!), 'the left-out best id is never drafted')
    await runner.unloadAdapter(slot)
  }
  await t.rejects(
    runner.loadAdapter({ ...medusa, key: 'unsorted', draftVocabulary: Int32Array.of(5, 3) }),
    { code: 'adapter_invalid', message: /draft vocabulary entry 1 is 3; expected ascending token ids/ },
    'an unsorted draft vocabulary is refused',
  )
  await t.rejects(
    runner.loadAdapter({ ...medusa, key: 'too-large', draftVocabulary: Int32Array.of(V) }),
    { code: 'adapter_invalid' },
    'an id outside the vocabulary is refused',
  )
  await t.rejects(
    runner.loadAdapter({ ...medusa, key: 'empty', draftVocabulary: new Int32Array(0) }),
    { code: 'adapter_invalid', message: /expected at least one id/ },
    'an empty draft vocabulary is refused (absent means the whole vocabulary)',
  )
  t.equal(await runner.loadAdapter(medusa), 0, 'refused loads leave their slot free')
})

// The draft LM head's rows are copied in the weights' own format (f32, bf16, int8 blocks with
// their scales): a head's ids over a draft vocabulary are exactly its full ranking's first ids
// that the vocabulary holds (the same logits, bit for bit, read from the gathered rows).
for (const [dtype, weights] of [
  ['float32', 'auto'],
  ['bfloat16', 'auto'],
  ['float32', 'int8'],
] as const) {
  t.test(`draft vocabulary over ${weights === 'int8' ? 'int8' : dtype} weights`, async (t) => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-draft-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    await buildModel(dir, { arch: 'llama', hiddenSize: 64, numLayers: 1, seed: 9, dtype })
    const runner = new NativeStepRunner(dir, { threads: 2, kv_cache_tokens: 64, kv_block_size: 4, weights })
    t.teardown(() => runner.close())
    const spec = await runner.load()
    const V = spec.vocabSize
    const H = spec.hiddenSize
    const bias = Float32Array.from({ length: H }, (_, i) => Math.cos(i) * 0.5)
    const heads = [0, 1].map(() => ({ blocks: [{ weight: new Float32Array(H * H), bias }] }))
    const medusa: MedusaWeights = { kind: 'medusa', key: 'full', numHeads: 2, numLayers: 1, heads }
    // Runs of consecutive ids (one device copy each) and lone ids.
    const draftVocabulary = Int32Array.from(
      Array.from({ length: V }, (_, id) => id).filter((id) => id % 7 < 3 || id % 11 === 0),
    )
    const full = await runner.loadAdapter(medusa)
    const cut = await runner.loadAdapter({ ...medusa, key: 'cut', draftVocabulary })
    const K = 6
    const prompt = [3, 1, 4, 1, 5]
    const draftsOf = async (slot: number, k: number): Promise<Int32Array> => {
      const seq = new TestSequence(1, spec.kvBlockSize, blockAllocator(spec.kvBlockCount))
      return (await runner.step(batchOf([seq.row(prompt, { medusaSlot: slot, medusaHeads: 2 })], k))).draftIds
    }
    const ranking = await draftsOf(full, V)
    const got = await draftsOf(cut, K)
    const kept = new Set(draftVocabulary)
    for (const h of [0, 1]) {
      const expected = Array.from(ranking.subarray(h * V, (h + 1) * V)).filter((id) => kept.has(id))
      t.same(Array.from(got.subarray(h * K, (h + 1) * K)), expected.slice(0, K), `head ${h}`)
    }
  })
}
