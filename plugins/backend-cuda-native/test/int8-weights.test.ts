// 8-bit weights (`weights: int8`). The kernels against the reference and the load-time conversion
// are families of the kernel self-test (native/src/selftest: `matmul int8`, `int8 convert`), run
// here on a seed of their own and required to be present and within bounds. Then the option
// reaches the model through NativeStepRunner: on small testkit models an int8 runner's greedy
// tokens and top-20 logprobs stay close to the stored weights' over a prefill (every position
// sampled) and decode steps, and what cannot be quantised is refused at load with a coded error.
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { buildModel, type BuildModelOptions } from '@loom/testkit'
import { loadNative, NativeStepRunner } from '../src/index.ts'
import { batchOf, blockAllocator, sampledPositions, TestSequence, type SampledPosition } from './helpers.ts'
import { buildTestProgram, run } from './test-program.ts'

t.test('int8 kernels and conversion in the kernel self-test (seed 11)', async (t) => {
  // The build kernels.test.ts uses (shared, built once per options).
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const result = await run(built.program, ['--seed', '11'])
  t.equal(result.status, 0, `self-test passes: ${result.output.slice(-600)}`)
  for (const family of ['matmul int8', 'int8 convert']) {
    const line = new RegExp(`^${family}: .*\\(([0-9.]+) of bound\\)$`, 'm').exec(result.output)
    t.ok(line, `family ${family} ran`)
    if (line) t.ok(Number(line[1]) <= 1, `${family}: worst case within its bound (${line[0]})`)
  }
})

/** Every sampled position of a 12-token prefill (each position) and 8 decode steps, for one runner. */
async function trace(modelDir: string, weights: 'auto' | 'int8'): Promise<SampledPosition[]> {
  const runner = new NativeStepRunner(modelDir, { threads: 2, kv_cache_tokens: 256, weights })
  try {
    const spec = await runner.load()
    const seq = new TestSequence(1, spec.kvBlockSize, blockAllocator(spec.kvBlockCount))
    const prompt = [3, 17, 42, 7, 99, 5, 23, 61, 2, 8, 13, 21]
    const out = sampledPositions(await runner.step(batchOf([seq.row(prompt, { allLogits: true })])))
    // Fixed decode inputs (not the sampled tokens), so both runners see the same sequence.
    let next = 1
    for (let s = 0; s < 8; s++) {
      out.push(...sampledPositions(await runner.step(batchOf([seq.row([next])]))))
      next = (next * 31 + s) % spec.vocabSize
    }
    return out
  } finally {
    await runner.close()
  }
}

/**
 * Largest |logprob difference| between two runs over the ids both report in their top 20, and
 * how often the greedy tokens agree.
 */
function compare(a: readonly SampledPosition[], b: readonly SampledPosition[]): { worst: number; agree: number } {
  let worst = 0
  let agree = 0
  a.forEach((pa, i) => {
    const pb = b[i]!
    if (pa.token === pb.token) agree++
    const lpB = new Map(pb.top.map(({ id, logprob }) => [id, logprob]))
    for (const { id, logprob } of pa.top) {
      const there = lpB.get(id)
      if (there !== undefined) worst = Math.max(worst, Math.abs(logprob - there))
    }
  })
  return { worst, agree }
}

const models: { name: string; model: BuildModelOptions }[] = [
  { name: 'llama f32, untied', model: { arch: 'llama', hiddenSize: 64, intermediateSize: 96, numLayers: 2 } },
  {
    name: 'mistral bf16, tied (the LM head gets its own int8 copy)',
    model: {
      arch: 'mistral',
      hiddenSize: 96,
      numLayers: 2,
      numHeads: 8,
      numKvHeads: 2,
      tieWordEmbeddings: true,
      dtype: 'bfloat16',
    },
  },
  {
    name: 'qwen2 f16, biases',
    model: { arch: 'qwen2', hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 1, dtype: 'float16' },
  },
]

for (const c of models) {
  t.test(`int8 close to the stored weights (${c.name})`, async (t) => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-int8-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    await buildModel(dir, { ...c.model, seed: 3 })
    const stored = await trace(dir, 'auto')
    const int8 = await trace(dir, 'int8')
    t.equal(int8.length, 20, 'every position sampled')
    const { worst, agree } = compare(int8, stored)
    t.comment(`worst top-20 logprob difference ${worst.toExponential(2)}, greedy agreement ${agree}/${stored.length}`)
    // Weights rounded to int8 blocks (each within half a step of 1/127 of its block's largest
    // weight) and, with VNNI, activations too, through 2 layers of a random model whose logits
    // span ~10: measured up to ~0.2 nats on these three, where a wrong scale or block moves them
    // by whole nats, and far above the ~1e-6 that would mean nothing was quantised.
    t.ok(worst < 0.5, `worst logprob difference ${worst.toExponential(2)} < 0.5`)
    t.ok(worst > 1e-5, "the int8 runner's results differ from the stored weights' (the option reached the model)")
    t.ok(agree >= stored.length - 2, `greedy choice agrees on ${agree} of ${stored.length} positions`)
  })
}

t.test('int8 refuses what it cannot quantise, with coded errors', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-int8-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  // hidden 48: the projections' input size is not a multiple of 32.
  await buildModel(dir, {
    arch: 'llama',
    hiddenSize: 48,
    intermediateSize: 64,
    numLayers: 1,
    numHeads: 4,
    numKvHeads: 2,
  })
  const runner = new NativeStepRunner(dir, { threads: 1, kv_cache_tokens: 64, weights: 'int8' })
  await t.rejects(runner.load(), { code: 'model_invalid', message: /multiple of 32.*\[\d+, 48\]/ })
  await runner.close()
  if (loadNative().devices.includes('cuda')) {
    // Without a usable GPU: cuda_unavailable; with one: int8 is refused as a cpu option.
    const gpu = new NativeStepRunner(dir, { device: 'cuda', threads: 1, kv_cache_tokens: 64, weights: 'int8' })
    await t.rejects(gpu.load(), { code: /model_invalid|cuda_unavailable/ })
    await gpu.close()
  }
  t.throws(() => new NativeStepRunner(dir, { weights: 'int4' as 'int8' }), 'an unknown weights value fails validation')
})
