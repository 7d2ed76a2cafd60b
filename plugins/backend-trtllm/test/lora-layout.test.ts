/**
 * The PEFT → TensorRT-LLM LoRA conversion, checked by its numbers: a converted adapter, read back
 * in TensorRT-LLM's layout (rows of A [r, in] then B [out, r], config rows of module id, layer and
 * rank), reproduces the testkit's independently merged weights W + scale·B·A for every module of
 * every layer, in each engine dtype.
 */
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { readLoraAdapter } from '@loom/core'
import {
  PROJECTIONS,
  bf16BitsToF32,
  buildLoraAdapter,
  buildModel,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  mergeLoraIntoModel,
  projectionShape,
  readModelTensors,
  type BuildLoraOptions,
  type HfModelConfig,
  type Projection,
} from '@loom/testkit'
import { toBfloat16Bits, toFloat16Bits, type EngineDtype } from '../src/half-float.ts'
import { LORA_CONFIG_COLUMNS, TRTLLM_LORA_MODULES, toTrtllmLora, type TrtllmLoraTensors } from '../src/lora-layout.ts'
import { loraTaskId } from '../src/lora-task-id.ts'
import { specOf } from './engine-fixture.ts'

t.test("module ids are TensorRT-LLM's LoraModule::ModuleType for its own Llama mapping", async (t) => {
  t.same(Object.fromEntries(PROJECTIONS.map((p) => [p, [TRTLLM_LORA_MODULES[p].id, TRTLLM_LORA_MODULES[p].name]])), {
    q_proj: [1, 'attn_q'],
    k_proj: [2, 'attn_k'],
    v_proj: [3, 'attn_v'],
    o_proj: [4, 'attn_dense'],
    gate_proj: [5, 'mlp_h_to_4h'],
    down_proj: [6, 'mlp_4h_to_h'],
    up_proj: [7, 'mlp_gate'],
  })
})

/** Value `i` of the weights tensor as a number, whatever its dtype. */
function reader(tensors: TrtllmLoraTensors): (i: number) => number {
  const { weights, dtype } = tensors
  if (dtype === 'float32') return (i) => weights[i]!
  return dtype === 'float16' ? (i) => f16BitsToF32(weights[i]!) : (i) => bf16BitsToF32(weights[i]!)
}

const MODULE_OF_ID = new Map(PROJECTIONS.map((p) => [TRTLLM_LORA_MODULES[p].id, p]))

/**
 * Read `tensors` back as TensorRT-LLM does and check, for every row, that W + B·A equals the merged
 * model's weight (within the dtype's rounding), and that the rows cover exactly `expected`.
 */
function checkAgainstMerge(
  t: Test,
  tensors: TrtllmLoraTensors,
  model: HfModelConfig,
  base: ReturnType<typeof readModelTensors>,
  merged: ReturnType<typeof readModelTensors>,
  expected: Map<string, number>,
  tolerance: { atol: number; rtol: number },
): void {
  const [rows, maxRow] = tensors.weightsShape
  t.same(tensors.configShape, [rows, LORA_CONFIG_COLUMNS])
  t.equal(tensors.config.length, rows * LORA_CONFIG_COLUMNS)
  t.equal(tensors.weights.length, rows * maxRow)
  t.equal(tensors.byteLength, tensors.weights.byteLength + tensors.config.byteLength)
  const value = reader(tensors)
  const seen = new Map<string, number>()
  let worst = 0
  let longest = 0
  for (let row = 0; row < rows; row++) {
    const [moduleId, layer, rank] = tensors.config.subarray(row * 3, row * 3 + 3) as unknown as [number, number, number]
    const module = MODULE_OF_ID.get(moduleId) as Projection
    t.ok(module, `row ${row}: module id ${moduleId} is one Loom adapts`)
    seen.set(`${layer}.${module}`, rank)
    const [outF, inF] = projectionShape(model, module)
    const rowBase = row * maxRow
    const used = rank * (inF + outF)
    longest = Math.max(longest, used)
    for (let i = used; i < maxRow; i++) {
      if (value(rowBase + i) !== 0) t.fail(`row ${row} padding at ${i} is ${value(rowBase + i)}`)
    }
    const section = module === 'gate_proj' || module === 'up_proj' || module === 'down_proj' ? 'mlp' : 'self_attn'
    const name = `model.layers.${layer}.${section}.${module}.weight`
    const w = base.get(name)!.data
    const target = merged.get(name)!.data
    for (let o = 0; o < outF; o++) {
      for (let i = 0; i < inF; i++) {
        let delta = 0
        // A [r, in] at the row's start, B [out, r] right after it.
        for (let r = 0; r < rank; r++)
          delta += value(rowBase + rank * inF + o * rank + r) * value(rowBase + r * inF + i)
        const got = w[o * inF + i]! + delta
        const want = target[o * inF + i]!
        const err = Math.abs(got - want)
        worst = Math.max(worst, err / (tolerance.atol + tolerance.rtol * Math.abs(want)))
        if (err > tolerance.atol + tolerance.rtol * Math.abs(want)) {
          t.fail(`${name}[${o}, ${i}]: W + B·A = ${got}, merged ${want}`)
          return
        }
      }
    }
  }
  t.equal(maxRow, longest, 'rows are padded to the longest one only')
  t.same(
    Object.fromEntries(seen),
    Object.fromEntries(expected),
    'one config row per adapted (layer, module), with its rank',
  )
  t.ok(worst <= 1, `worst error / tolerance ${worst.toFixed(3)}`)
}

const TOLERANCE: Record<EngineDtype, { atol: number; rtol: number }> = {
  float32: { atol: 1e-5, rtol: 1e-5 },
  float16: { atol: 4e-3, rtol: 4e-3 },
  bfloat16: { atol: 3e-2, rtol: 2e-2 },
}

const CASES: { name: string; lora: Omit<BuildLoraOptions, 'model'> }[] = [
  {
    name: 'every projection, rank and alpha patterns',
    lora: {
      rank: 4,
      alpha: 8,
      targetModules: [...PROJECTIONS],
      rankPattern: { down_proj: 2, 'model.layers.1.self_attn.q_proj': 6 },
      alphaPattern: { v_proj: 3 },
      seed: 3,
    },
  },
  { name: 'rsLoRA on some layers', lora: { rank: 8, alpha: 16, useRslora: true, layers: [0, 2], seed: 4 } },
]

for (const { name, lora } of CASES) {
  t.test(`W + B·A in TensorRT-LLM's layout equals the merged model: ${name}`, async (t) => {
    const dir = t.testdir()
    const modelDir = join(dir, 'model')
    const model = await buildModel(modelDir, { numLayers: 3, hiddenSize: 32, intermediateSize: 48, seed: 1 })
    const loraDir = join(dir, 'lora')
    const adapterConfig = await buildLoraAdapter(loraDir, { model, ...lora })
    await mergeLoraIntoModel(modelDir, loraDir, join(dir, 'merged'))
    const base = readModelTensors(modelDir)
    const merged = readModelTensors(join(dir, 'merged'))
    // What the adapter adapts, by `${layer}.${module}` → rank, from its own config.
    const expected = new Map<string, number>()
    for (const layer of lora.layers ?? [0, 1, 2]) {
      for (const module of adapterConfig.target_modules as Projection[]) {
        const full = `model.layers.${layer}.${module === 'gate_proj' || module === 'up_proj' || module === 'down_proj' ? 'mlp' : 'self_attn'}.${module}`
        const rank = adapterConfig.rank_pattern[full] ?? adapterConfig.rank_pattern[module] ?? adapterConfig.r
        expected.set(`${layer}.${module}`, rank)
      }
    }
    const weights = await readLoraAdapter(loraDir, 'test-lora', specOf(model))
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      const tensors = toTrtllmLora(weights, dtype)
      t.equal(tensors.dtype, dtype)
      t.type(tensors.weights, dtype === 'float32' ? Float32Array : Uint16Array)
      t.test(dtype, async (t) => checkAgainstMerge(t, tensors, model, base, merged, expected, TOLERANCE[dtype]))
    }
  })
}

t.test('config rows go layer by layer, modules in id order', async (t) => {
  const dir = t.testdir()
  const model = await buildModel(join(dir, 'model'), { numLayers: 2, hiddenSize: 16, intermediateSize: 24 })
  await buildLoraAdapter(join(dir, 'lora'), { model, rank: 2, targetModules: ['up_proj', 'q_proj', 'v_proj'] })
  const tensors = toTrtllmLora(await readLoraAdapter(join(dir, 'lora'), 'x', specOf(model)), 'float16')
  t.same(Array.from(tensors.config), [1, 0, 2, 3, 0, 2, 7, 0, 2, 1, 1, 2, 3, 1, 2, 7, 1, 2])
  // up_proj (mlp_gate) is the longest row: 2 · (16 + 24).
  t.same(tensors.weightsShape, [6, 80])
})

t.test('f16 and bf16 encodings round like PyTorch (bit-exact with the testkit codec)', async (t) => {
  const specials = [0, -0, 1, -1, 65504, 65520, 1e-8, 5.96e-8, 2.98e-8, 6.1e-5, 1 / 3, Infinity, -Infinity, 3.4e38]
  const values = [...specials]
  let x = 12345
  for (let i = 0; i < 20000; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0
    values.push(((x / 2 ** 32) * 2 - 1) * 10 ** ((i % 12) - 8))
  }
  let f16 = 0
  let bf16 = 0
  for (const v of values) {
    if (toFloat16Bits(v) !== f32ToF16Bits(v)) f16++
    if (toBfloat16Bits(v) !== f32ToBf16Bits(v)) bf16++
  }
  t.equal(f16, 0, 'f16 mismatches')
  t.equal(bf16, 0, 'bf16 mismatches')
  t.ok(Number.isNaN(f16BitsToF32(toFloat16Bits(NaN))))
  t.ok(Number.isNaN(bf16BitsToF32(toBfloat16Bits(NaN))))
})

t.test('task ids: stable per adapter revision, distinct across revisions, safe positive integers', async (t) => {
  const a = loraTaskId('hub:acme/lora@0123abc')
  t.equal(loraTaskId('hub:acme/lora@0123abc'), a)
  t.not(loraTaskId('hub:acme/lora@4567def'), a)
  const ids = new Set<number>()
  for (let i = 0; i < 5000; i++) {
    const id = loraTaskId(`local:adapter-${i}@v1`)
    if (!Number.isSafeInteger(id) || id < 1) t.fail(`id ${id}`)
    ids.add(id)
  }
  t.equal(ids.size, 5000)
})
