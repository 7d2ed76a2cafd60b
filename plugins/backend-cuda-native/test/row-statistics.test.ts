// What the runner returns beside each logits row, computed natively so the engine need not scan
// the vocabulary again for every token: the log-softmax normaliser (vector exp, double sum) and
// the first maximum (greedy decoding's choice).
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { NativeStepRunner } from '../src/index.ts'
import { blockAllocator, TestSequence } from './helpers.ts'

/** float64 log Σ exp of one row (the engine's own computation). */
function logSumExp(row: Float32Array): number {
  let max = -Infinity
  for (const x of row) max = Math.max(max, x)
  let sum = 0
  for (const x of row) sum += Math.exp(x - max)
  return max + Math.log(sum)
}

t.test('logNormalizers and argmax of every returned logits row', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-lognorm-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  // A vocabulary that is not a multiple of the vector width.
  await buildModel(dir, { arch: 'llama', hiddenSize: 64, numLayers: 2, vocabSize: 1003, seed: 21 })
  const runner = new NativeStepRunner(dir, { threads: 2, kv_cache_tokens: 256, kv_block_size: 4 })
  t.teardown(() => runner.close())
  const spec = await runner.load()
  const V = spec.vocabSize
  const seq = new TestSequence(1, spec.kvBlockSize, blockAllocator(spec.kvBlockCount))
  const row = { ...seq.row([5, 9, 14, 2, 77, 301]), logitIndices: Int32Array.of(0, 3, 5) }
  const out = await runner.step({ rows: [row], kvCopies: [] })
  t.equal(out.logNormalizers?.length, 3, 'one normaliser per logits row')
  for (let i = 0; i < 3; i++) {
    const expected = logSumExp(out.logits.subarray(i * V, (i + 1) * V))
    const got = out.logNormalizers![i]!
    t.ok(Math.abs(got - expected) <= 1e-6 * Math.max(1, Math.abs(expected)), `row ${i}: ${got} vs ${expected}`)
    const row = out.logits.subarray(i * V, (i + 1) * V)
    t.equal(out.argmax?.[i], row.indexOf(Math.max(...row)), `row ${i}: argmax is the first maximum`)
  }
})
