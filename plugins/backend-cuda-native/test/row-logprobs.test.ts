// What the runner returns for each sampled position instead of logits: the chosen token's raw
// log-softmax and the top logprobs (computed natively, where the logits are), and for greedy rows
// the first maximum. Held to the f64 reference's log-softmax on a vocabulary that is not a
// multiple of the vector width.
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { GREEDY_SAMPLING, type RowSampling } from '@loom/core'
import { buildModel, ReferenceModel } from '@loom/testkit'
import { NativeStepRunner } from '../src/index.ts'
import {
  batchOf,
  blockAllocator,
  GREEDY_TOP,
  logSoftmax,
  relErrorTop,
  sampledPositions,
  TestSequence,
  TOP_LOGPROBS,
} from './helpers.ts'

t.test('logprobs, top logprobs and greedy tokens of every sampled position', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-logprobs-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  // A vocabulary that is not a multiple of the vector width.
  await buildModel(dir, { arch: 'llama', hiddenSize: 64, numLayers: 2, vocabSize: 1003, seed: 21 })
  const ref = await ReferenceModel.load(dir)
  const runner = new NativeStepRunner(dir, { threads: 2, kv_cache_tokens: 256, kv_block_size: 4 })
  t.teardown(() => runner.close())
  const spec = await runner.load()
  t.equal(spec.vocabSize, 1003)
  const alloc = blockAllocator(spec.kvBlockCount)
  const greedy = new TestSequence(1, spec.kvBlockSize, alloc)
  const few = new TestSequence(2, spec.kvBlockSize, alloc)
  const sampled = new TestSequence(3, spec.kvBlockSize, alloc)
  const tokens = [5, 9, 14, 2, 77, 301]
  // A seeded row at temperature 2: its logprobs are still the raw log-softmax (before temperature).
  const warm: RowSampling = {
    ...GREEDY_TOP,
    params: { ...GREEDY_SAMPLING, temperature: 2, seed: 99n },
    draws: 3,
    topLogprobs: 5,
  }
  const out = await runner.step(
    batchOf([
      greedy.row(tokens, { allLogits: true }), // every position: 6 sampled
      few.row(tokens, { sampling: { ...GREEDY_TOP, topLogprobs: 3 } }), // the last: 1, 3 top logprobs
      sampled.row(tokens, { sampling: warm }),
    ]),
  )
  const positions = sampledPositions(out)
  t.equal(positions.length, 8, 'one position per node, one per causal row')
  const exp = ref.newSequence().forward(tokens)
  const refs = [...exp, exp[5]!, exp[5]!]
  const widths = [...tokens.map(() => TOP_LOGPROBS), 3, 5]
  let worst = 0
  positions.forEach((p, i) => {
    const lp = logSoftmax(refs[i]!)
    worst = Math.max(worst, relErrorTop(p, refs[i]!))
    t.equal(p.top.length, widths[i], `position ${i}: ${widths[i]} top logprobs`)
    // Padding past the row's topLogprobs: (-1, 0).
    for (let j = widths[i]!; j < TOP_LOGPROBS; j++) {
      if (out.topIds[i * TOP_LOGPROBS + j] !== -1 || out.topLogprobs[i * TOP_LOGPROBS + j] !== 0) {
        t.fail(`position ${i}: entry ${j} past the row's top logprobs is not (-1, 0)`)
        break
      }
    }
    // Best first, ties to the lower id.
    for (let j = 1; j < p.top.length; j++) {
      const [a, b] = [p.top[j - 1]!, p.top[j]!]
      if (!(a.logprob > b.logprob || (a.logprob === b.logprob && a.id < b.id)))
        t.fail(`position ${i}: top ${j - 1} (${a.id}, ${a.logprob}) before (${b.id}, ${b.logprob})`)
    }
    if (i < 7) {
      // Greedy: the reference's first maximum, reported as the best top logprob.
      t.equal(p.token, lp.indexOf(Math.max(...lp)), `position ${i}: greedy token is the reference argmax`)
      t.same(p.top[0], { id: p.token, logprob: p.logprob }, `position ${i}: and the first top logprob`)
    } else {
      t.ok(p.token >= 0 && p.token < spec.vocabSize, `sampled token ${p.token}`)
      const raw = lp[p.token]!
      t.ok(Math.abs(p.logprob - raw) <= 1e-5, `sampled token's logprob ${p.logprob} is the raw ${raw}`)
    }
  })
  t.ok(worst <= 1e-4, `logprobs and top logprobs against the reference log-softmax: ${worst.toExponential(2)}`)
  // The probabilities of the top ids sum to at most 1: a proper normaliser.
  for (const [i, p] of positions.entries()) {
    const mass = p.top.reduce((s, e) => s + Math.exp(e.logprob), 0)
    if (mass > 1 + 1e-5) t.fail(`position ${i}: top probabilities sum to ${mass}`)
  }
})

t.test('prompt logprobs: scoreTargets give each target raw log-softmax, beside sampled rows', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-scores-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await buildModel(dir, { arch: 'llama', hiddenSize: 64, numLayers: 2, vocabSize: 1003, seed: 23 })
  const ref = await ReferenceModel.load(dir)
  const runner = new NativeStepRunner(dir, { threads: 2, kv_cache_tokens: 256, kv_block_size: 4 })
  t.teardown(() => runner.close())
  const spec = await runner.load()
  const alloc = blockAllocator(spec.kvBlockCount)
  const prompt = [5, 9, 14, 2, 77, 301, 4, 1000]
  const other = [8, 3, 600]
  const scored = new TestSequence(1, spec.kvBlockSize, alloc)
  const plain = new TestSequence(2, spec.kvBlockSize, alloc)
  // A prefill chunk of the first 5 prompt tokens (samples nothing: scores the next prompt token at
  // each position, the sixth included), beside a causal row that samples; then the rest, sampled.
  const first = { ...scored.row(prompt.slice(0, 5)), sampling: null, scoreTargets: Int32Array.from(prompt.slice(1, 6)) }
  const out1 = await runner.step(batchOf([plain.row(other), first]))
  t.equal(out1.tokens.length, 1, 'only the causal row samples')
  // The runner reuses its output arrays: read them before the next step.
  const firstScores = [...out1.scores]
  const rest = prompt.slice(5)
  const targets = Int32Array.from([...rest.slice(1), -1])
  const out2 = await runner.step(batchOf([{ ...scored.row(rest), scoreTargets: targets }]))
  const scores = [...firstScores, ...out2.scores]
  t.equal(scores.length, prompt.length - 1, 'one score per prompt token after the first')
  const exp = ref.newSequence().forward(prompt)
  let worst = 0
  for (let i = 0; i < prompt.length - 1; i++) {
    const lp = logSoftmax(exp[i]!)
    worst = Math.max(worst, Math.abs(scores[i]! - lp[prompt[i + 1]!]!))
  }
  t.ok(worst < 1e-4, `worst |score - reference logprob| ${worst.toExponential(2)} < 1e-4`)
  t.equal(out2.tokens.length, 1, 'the last chunk samples after the prompt')
})
