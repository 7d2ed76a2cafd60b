// Short steps on the JS thread (`inline_step_max_us`): which steps go there, the same results
// as on a worker, and the same coded errors.
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { NativeStepRunner } from '../src/index.ts'
import { InlineStepPolicy } from '../src/inline-steps.ts'
import { batchOf, blockAllocator, TestSequence } from './helpers.ts'

t.test('InlineStepPolicy predicts from the last step of about as many tokens', async (t) => {
  const policy = new InlineStepPolicy(1000)
  t.notOk(policy.inline(1), 'nothing measured yet: a worker')
  t.equal(policy.predictUs(1), Number.POSITIVE_INFINITY)
  policy.record(1, 150)
  t.ok(policy.inline(1))
  t.equal(policy.predictUs(3), 450, 'an unmeasured size scales the nearest smaller one by tokens')
  t.notOk(policy.inline(8), '150 µs × 8 is over the bound')
  policy.record(8, 400)
  t.equal(policy.predictUs(12), 600, 'the same size class, more tokens: scaled up')
  t.equal(policy.predictUs(9), 450)
  t.equal(policy.predictUs(5), 150 * 5, 'a size class below the measured one is not read from above')
  t.equal(policy.predictUs(16), 800, 'class 16-31 unmeasured: from the 8-token step')
  t.notOk(policy.inline(32))
  policy.record(1, 5000)
  t.notOk(policy.inline(1), 'a size whose steps grew past the bound moves to a worker')
  policy.record(1, Number.NaN)
  t.equal(policy.predictUs(1), 5000, 'a NaN measurement is ignored')
  const never = new InlineStepPolicy(0)
  never.record(1, 1)
  t.notOk(never.inline(1), 'maxUs 0: every step on a worker')
})

t.test('steps on the JS thread match steps on a worker, errors included', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-inline-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await buildModel(dir, { arch: 'llama', hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2 })
  const opts = { threads: 2, kv_cache_tokens: 512, kv_block_size: 8 }
  const inline = new NativeStepRunner(dir, { ...opts, inline_step_max_us: 1_000_000 })
  const worker = new NativeStepRunner(dir, { ...opts, inline_step_max_us: 0 })
  t.teardown(() => Promise.all([inline.close(), worker.close()]))
  await inline.load()
  await worker.load()

  // Two sequences, a prefill then greedy decode steps, through both runners in lockstep.
  const prompts = [
    [5, 17, 42, 99, 3, 250, 411],
    [7, 7, 120, 64],
  ]
  const seqs = (alloc: () => number) => prompts.map((_, i) => new TestSequence(i + 1, 8, alloc, -1))
  const runs = [
    { runner: inline, seqs: seqs(blockAllocator(64)) },
    { runner: worker, seqs: seqs(blockAllocator(64)) },
  ]
  const outs: { tokens: number[]; logprobs: number[] }[][] = [[], []]
  let next = prompts.map((p) => p)
  for (let step = 0; step < 12; step++) {
    const results = []
    for (const [r, run] of runs.entries()) {
      const out = await run.runner.step(batchOf(run.seqs.map((s, i) => s.row(next[i]!))))
      results.push({ tokens: [...out.tokens], logprobs: [...out.logprobs] })
      outs[r]!.push(results[r]!)
    }
    next = results[0]!.tokens.map((tok) => [tok])
  }
  t.same(outs[0], outs[1], 'the same tokens and logprobs, bit for bit, every step')
  const inlineProfile = inline.profile()
  t.equal(inlineProfile.steps, 12)
  // The prefill (11 tokens) and the first decode step (2 tokens: no size at or below it measured)
  // ran on a worker, every later one inline.
  t.equal(inlineProfile.inlineSteps, 10, 'decode steps after the first ran inline')
  t.equal(worker.profile().inlineSteps, 0, 'inline_step_max_us 0: none did')

  // A bad step on the JS thread rejects with the same coded error and leaves the runner usable.
  const [a] = runs[0]!.seqs
  const bad = { ...a!.row([1]), tokens: Int32Array.of(100_000) }
  await t.rejects(inline.step(batchOf([bad])), { code: 'native_error', message: /outside the vocabulary/ })
  t.equal(inline.profile().inlineSteps, 0, 'the failed step ran inline and is not counted as done')
  const again = await inline.step(batchOf([{ ...bad, tokens: Int32Array.of(1) }]))
  t.equal(again.tokens.length, 1, 'the next step runs')
})
