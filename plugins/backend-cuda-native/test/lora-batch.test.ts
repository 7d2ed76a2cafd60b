// A LoRA row equals the merged model W + scale·B·A, and every row of a mixed batch (base rows,
// distinct adapters of ranks 1..128, a shared adapter, a prefill chunk next to decode rows)
// equals the same row run alone. Steps return greedy tokens and their top-20 logprobs (never
// logits): two runs agree when their tokens and top logprobs do, on the scale of the f64
// reference's logits (`relErrorBetween`).
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import type { StepRow } from '@loom/core'
import { buildLoraAdapter, buildModel, mergeLoraIntoModel, ReferenceModel } from '@loom/testkit'
import { NativeStepRunner } from '../src/index.ts'
import { batchOf, blockAllocator, relErrorBetween, sampledPositions, TestSequence, toLoraWeights } from './helpers.ts'

const ALL = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const

t.test('LoRA row equals the merged weights', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-merge-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const config = await buildModel(path.join(dir, 'base'), { arch: 'llama', hiddenSize: 64, numLayers: 2, seed: 2 })
  await buildLoraAdapter(path.join(dir, 'lora'), { model: config, rank: 16, alpha: 8, seed: 9, targetModules: ALL })
  await mergeLoraIntoModel(path.join(dir, 'base'), path.join(dir, 'lora'), path.join(dir, 'merged'))
  const ref = await ReferenceModel.load(path.join(dir, 'base'))
  const withLora = new NativeStepRunner(path.join(dir, 'base'), { threads: 2, kv_cache_tokens: 128 })
  const merged = new NativeStepRunner(path.join(dir, 'merged'), { threads: 2, kv_cache_tokens: 128 })
  t.teardown(() => Promise.all([withLora.close(), merged.close()]))
  const spec = await withLora.load()
  await merged.load()
  const slot = await withLora.loadAdapter(toLoraWeights(ref.loadLora(path.join(dir, 'lora')), 'lora'))
  const a = new TestSequence(1, spec.kvBlockSize, blockAllocator(spec.kvBlockCount), slot)
  const b = new TestSequence(1, spec.kvBlockSize, blockAllocator(spec.kvBlockCount))
  const refTuned = ref.newSequence(path.join(dir, 'lora'))
  let worst = 0
  let positions = 0
  for (const tokens of [[5, 6, 7, 8, 9, 10], [11], [12], [13]]) {
    const x = sampledPositions(await withLora.step(batchOf([a.row(tokens, { allLogits: true })])))
    const y = sampledPositions(await merged.step(batchOf([b.row(tokens, { allLogits: true })])))
    refTuned.forward(tokens).forEach((exp, i) => (worst = Math.max(worst, relErrorBetween(x[i]!, y[i]!, exp))))
    positions += x.length
  }
  t.equal(positions, 9, 'every position sampled')
  t.ok(worst <= 1e-4, `worst relative error ${worst.toExponential(2)}`)
})

t.test('mixed batch rows equal each row run alone', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-mixed-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const config = await buildModel(path.join(dir, 'base'), {
    arch: 'qwen2',
    hiddenSize: 128,
    intermediateSize: 160,
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 2,
    seed: 4,
  })
  const ranks = [1, 16, 64, 128]
  const ref = await ReferenceModel.load(path.join(dir, 'base'))
  const loraDirs: string[] = []
  const opts = { threads: 2, kv_cache_tokens: 2048, adapter_slots: 8, max_lora_rank: 128 }
  const batched = new NativeStepRunner(path.join(dir, 'base'), opts)
  const alone = new NativeStepRunner(path.join(dir, 'base'), opts)
  t.teardown(() => Promise.all([batched.close(), alone.close()]))
  const spec = await batched.load()
  await alone.load()
  const slots: number[] = []
  for (const [i, rank] of ranks.entries()) {
    const loraDir = path.join(dir, `lora-${rank}`)
    // Odd adapters touch only attention, so some rows skip the MLP LoRA pass.
    await buildLoraAdapter(loraDir, {
      model: config,
      rank,
      alpha: rank * 2,
      seed: 20 + i,
      targetModules: i % 2 ? ['q_proj', 'v_proj', 'o_proj'] : ALL,
    })
    loraDirs.push(loraDir)
    const weights = toLoraWeights(ref.loadLora(loraDir), loraDir)
    slots.push(await batched.loadAdapter(weights))
    t.equal(await alone.loadAdapter(weights), slots[i])
  }
  // Rows: base, each adapter, the rank-16 adapter twice in a row (shared segment), base again.
  const rowSlots = [-1, slots[0]!, slots[1]!, slots[1]!, slots[2]!, slots[3]!, -1]
  const allocB = blockAllocator(spec.kvBlockCount)
  const allocA = blockAllocator(spec.kvBlockCount)
  const seqsB = rowSlots.map((s, i) => new TestSequence(i, spec.kvBlockSize, allocB, s))
  const seqsA = rowSlots.map((s, i) => new TestSequence(i, spec.kvBlockSize, allocA, s))
  // The f64 reference of each row, for the scale of its logits.
  const refs = rowSlots.map((s) => ref.newSequence(s < 0 ? null : loraDirs[slots.indexOf(s)]!))
  const V = spec.vocabSize
  const prompt = (i: number): number[] => Array.from({ length: 3 + 4 * i }, (_, k) => (k * 7 + i * 13) % V)
  let worst = 0
  for (let step = 0; step < 6; step++) {
    // Step 0 prefills every row; later steps decode, except row 3 which prefills late (step 2).
    const feeds = rowSlots.map((_, i) =>
      i === 3 ? (step < 2 ? null : step === 2 ? prompt(i) : [step]) : step === 0 ? prompt(i) : [step + i],
    )
    const rowsB: StepRow[] = []
    const feedIdx: number[] = []
    feeds.forEach((f, i) => {
      if (f) {
        rowsB.push(seqsB[i]!.row(f))
        feedIdx.push(i)
      }
    })
    const out = sampledPositions(await batched.step(batchOf(rowsB)))
    t.equal(out.length, rowsB.length)
    for (const [k, i] of feedIdx.entries()) {
      const [solo] = sampledPositions(await alone.step(batchOf([seqsA[i]!.row(feeds[i]!)])))
      const exp = refs[i]!.forward(feeds[i]!).at(-1)!
      worst = Math.max(worst, relErrorBetween(out[k]!, solo!, exp))
    }
  }
  t.ok(worst <= 1e-5, `worst relative error batched vs alone ${worst.toExponential(2)}`)
})
