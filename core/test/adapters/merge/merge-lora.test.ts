import { join } from 'node:path'
import t from 'tap'
import { SeededRandom } from '@loom/testkit'
import { dareUniform, mergeLoraWeights } from '../../../src/adapters/merge/merge-lora.ts'
import { writePeftAdapter } from '../../../src/adapters/merge/write-peft-adapter.ts'
import { projectionShape } from '../../../src/adapters/projection-shape.ts'
import { readLoraAdapter } from '../../../src/adapters/read-lora.ts'
import type { LoraModule, LoraModuleWeights, LoraWeights, ModelSpec } from '../../../src/contracts/step-runner.ts'
import { refDelta, refMerge } from './reference-merge.ts'

const spec: ModelSpec = {
  architecture: 'LlamaForCausalLM',
  dtype: 'float32',
  device: 'cpu',
  vocabSize: 16,
  hiddenSize: 8,
  intermediateSize: 12,
  numLayers: 2,
  numHeads: 2,
  numKvHeads: 1,
  headDim: 4,
  maxContextLength: 64,
  kvBlockSize: 16,
  kvBlockCount: 4,
  adapterSlots: 4,
  maxLoraRank: 64,
}
const shape = (m: LoraModule) => projectionShape(spec, m)
const random = new SeededRandom(11)

function lora(module: LoraModule, rank: number, scale: number): LoraModuleWeights {
  const [rows, cols] = shape(module)
  return { rank, scale, a: random.normalArray(rank * cols, 1), b: random.normalArray(rows * rank, 1) }
}

// For every module Σ ranks >= min(rows, cols), so even ties/dare results are exactly representable.
const inputs: LoraWeights[] = [
  {
    kind: 'lora',
    key: 'a',
    layers: [{ q_proj: lora('q_proj', 2, 2), k_proj: lora('k_proj', 4, 0.5) }, { down_proj: lora('down_proj', 3, 1) }],
  },
  {
    kind: 'lora',
    key: 'b',
    layers: [
      { q_proj: lora('q_proj', 3, 1) },
      { down_proj: lora('down_proj', 5, 1.5), q_proj: lora('q_proj', 8, 0.25) },
    ],
  },
  { kind: 'lora', key: 'c', layers: [{ q_proj: lora('q_proj', 3, 1) }, {}] },
]
const weights = [0.5, 0.3, -0.4]
const present: [number, LoraModule][] = [
  [0, 'q_proj'],
  [0, 'k_proj'],
  [1, 'down_proj'],
  [1, 'q_proj'],
]

function maxAbs(xs: number[]) {
  return xs.reduce((m, x) => Math.max(m, Math.abs(x)), 0)
}

for (const strategy of ['linear', 'ties', 'dare_linear', 'dare_ties'] as const) {
  for (const method of ['total', 'frequency'] as const) {
    if (method === 'frequency' && (strategy === 'linear' || strategy === 'dare_linear')) continue
    t.test(
      `${strategy}${strategy.endsWith('ties') ? ` (${method})` : ''}: every module equals the formula on ΔW_i = s_i B_i A_i`,
      async (t) => {
        const request = { weights, strategy, density: 0.6, majoritySignMethod: method, seed: 9 }
        const { weights: merged, report } = await mergeLoraWeights(inputs, request, 'k', { maxRank: 64, shape })
        t.equal(report.modules, 4)
        t.ok(report.maxRelativeError < 1e-5, `re-factoring is exact here (${report.maxRelativeError})`)
        for (const [layer, module] of present) {
          const [rows, cols] = shape(module)
          const users = inputs.map((w, i) => ({ w: w.layers[layer]?.[module], i })).filter((u) => u.w !== undefined)
          const want = refMerge(
            users.map((u) => refDelta(u.w!, rows, cols)),
            users.map((u) => weights[u.i]!),
            strategy,
            0.6,
            method,
            (j) => dareUniform(9, users[j]!.i, layer, module),
          )
          const m = merged.layers[layer]![module]!
          t.equal(m.scale, 1, 'scale folded into the factors')
          const got = refDelta(m, rows, cols)
          const err = maxAbs(got.map((g, i) => g - want[i]!))
          t.ok(err <= 2e-5 * maxAbs(want), `layer ${layer} ${module}: max diff ${err} (of ${maxAbs(want)})`)
          if (strategy === 'linear') {
            t.equal(
              m.rank,
              users.reduce((s, u) => s + u.w!.rank, 0),
              'linear concatenates ranks',
            )
          }
        }
        t.same(Object.keys(merged.layers[1]!).sort(), ['down_proj', 'q_proj'], 'untouched modules stay absent')
      },
    )
  }
}

t.test('the rank budget: min(Σ r_i, max rank); truncation is reported', async (t) => {
  const request = { weights, strategy: 'linear' as const, density: 0, majoritySignMethod: 'total' as const, seed: 0 }
  // q_proj of layer 0: ranks 2 + 3 + 3 = 8 = its full rank; a budget of 3 must truncate.
  const small = await mergeLoraWeights(inputs, request, 'k', { maxRank: 3, shape })
  for (const layer of small.weights.layers) for (const m of Object.values(layer)) t.ok(m.rank <= 3)
  t.ok(small.report.maxRelativeError > 0.01, `truncation error reported (${small.report.maxRelativeError})`)
  const ties = await mergeLoraWeights(inputs, { ...request, strategy: 'ties', density: 0.5 }, 'k', {
    maxRank: 64,
    shape,
  })
  t.equal(ties.weights.layers[0]!.k_proj!.rank, 4, 'a single input keeps at most its own rank')
})

t.test('the PEFT writer round-trips through the normal reader', async (t) => {
  const dir = t.testdir()
  const request = { weights, strategy: 'ties' as const, density: 0.5, majoritySignMethod: 'total' as const, seed: 0 }
  const { weights: merged } = await mergeLoraWeights(inputs, request, 'k', { maxRank: 64, shape })
  await writePeftAdapter(dir, merged)
  const back = await readLoraAdapter(join(dir), 'merged', spec)
  for (const [layer, module] of present) {
    const want = merged.layers[layer]![module]!
    const got = back.layers[layer]![module]!
    t.equal(got.rank, want.rank, `layer ${layer} ${module} rank`)
    t.equal(got.scale, 1)
    t.same(got.a, want.a)
    t.same(got.b, want.b)
  }
})
