// The cpu device's attention reads the keys a row's queries share once for all of them (the
// tokens of a prompt chunk or a tree row, and the query heads of a GQA group: attend_group in
// ops-cpu.cc), and each (token, head) alone otherwise. Either way a token's output must be the same
// bits: as a decode row, inside a prompt, as a tree node, and in a batch beside a long row whose
// keys span several pieces. Compared exactly: token, logprob and the top-20 logprobs.
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { NativeStepRunner } from '../src/index.ts'
import { batchOf, blockAllocator, sampledPositions, TestSequence, type SampledPosition } from './helpers.ts'

t.test('a token attends to the same bits alone, in a prompt, as a tree node and beside a long row', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-attn-groups-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  // Head dim 32 (a grouped kernel exists for it), two query heads per KV head.
  await buildModel(dir, {
    arch: 'llama',
    hiddenSize: 128,
    intermediateSize: 160,
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 2,
    seed: 12,
  })
  const runner = new NativeStepRunner(dir, { threads: 2, kv_cache_tokens: 2048 })
  t.teardown(() => runner.close())
  const spec = await runner.load()
  const alloc = blockAllocator(spec.kvBlockCount)
  const sequence = (id: number): TestSequence => new TestSequence(id, spec.kvBlockSize, alloc)
  const same = (a: SampledPosition, b: SampledPosition, what: string): void => {
    t.same(b, a, what)
  }
  const prompt = Array.from({ length: 37 }, (_, i) => (i * 29 + 3) % spec.vocabSize)
  const decoded = [101, 102, 103, 104]

  // A: the prompt, then one decode row per token (each query group: 2 heads, every key shared).
  const a = sequence(1)
  await runner.step(batchOf([a.row(prompt)]))
  const alone: SampledPosition[] = []
  for (const token of decoded) alone.push(sampledPositions(await runner.step(batchOf([a.row([token])])))[0]!)

  // B: prompt and decoded tokens as one prompt (units of 8 tokens × 2 heads, keys shared up to
  // each unit's first token), sampled at its last token.
  const b = sequence(2)
  const prefilled = sampledPositions(await runner.step(batchOf([b.row([...prompt, ...decoded])])))
  same(alone[3]!, prefilled[0]!, 'the last prompt token equals its decode row')

  // C: the prompt and the first token, then the rest as a tree row (a chain: every node sampled;
  // the cache shared, each node's ancestors its own), beside a long row (300 cached keys: its
  // queries go one by one, in pieces) in the same step.
  const c = sequence(3)
  await runner.step(batchOf([c.row([...prompt, decoded[0]!])]))
  const long = sequence(4)
  await runner.step(batchOf([long.row(Array.from({ length: 300 }, (_, i) => (i * 13 + 5) % spec.vocabSize))]))
  const longRow = long.row([7])
  const longAlone = sampledPositions(await runner.step(batchOf([longRow])))[0]!
  const tree = c.row([...decoded.slice(1), 55], { allLogits: true })
  const mixed = sampledPositions(await runner.step(batchOf([tree, longRow])))
  for (let i = 0; i < 3; i++) same(alone[i + 1]!, mixed[i]!, `tree node ${i} equals the decode row of its token`)
  same(longAlone, mixed[4]!, 'the long row equals itself alone')

  // D: the whole prompt as a tree row without a cache (every key a node's ancestor: no shared keys).
  const d = sequence(5)
  const chain = sampledPositions(await runner.step(batchOf([d.row([...prompt, ...decoded], { allLogits: true })])))
  for (let i = 0; i < 4; i++)
    same(alone[i]!, chain[prompt.length + i]!, `chain node ${prompt.length + i} equals its decode row`)
})
