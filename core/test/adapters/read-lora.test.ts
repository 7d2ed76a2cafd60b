import t, { type Test } from 'tap'
import { readFileSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import {
  buildLoraAdapter,
  buildModel,
  ReferenceModel,
  writeSafetensors,
  type BuildLoraOptions,
  type HfModelConfig,
  type TensorToWrite,
} from '@loom/testkit'
import { readLoraAdapter } from '../../src/adapters/read-lora.ts'
import { LoomError } from '../../src/errors/index.ts'
import { specOf } from './model-spec-of.ts'

const modelConfig = (numLayers = 2, hiddenSize = 64): HfModelConfig => ({
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  hidden_size: hiddenSize,
  intermediate_size: 2 * hiddenSize,
  num_hidden_layers: numLayers,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: hiddenSize / 4,
  vocab_size: 300,
  max_position_embeddings: 128,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  rope_scaling: null,
  tie_word_embeddings: false,
  torch_dtype: 'float32',
  bos_token_id: 0,
  eos_token_id: 1,
  hidden_act: 'silu',
})

async function expectInvalid(t: Test, promise: Promise<unknown>, fragment: string): Promise<void> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  )
  t.ok(err instanceof LoomError && err.code === 'adapter_invalid', `adapter_invalid: ${String(err)}`)
  const message = (err as Error | null)?.message ?? ''
  t.ok(message.includes('my/adapter') && message.includes(fragment), `"${message}" mentions "${fragment}"`)
}

async function adapter(t: Test, opts: Omit<BuildLoraOptions, 'model'> & { model?: HfModelConfig }): Promise<string> {
  const dir = t.testdir()
  await buildLoraAdapter(dir, { model: modelConfig(), ...opts })
  return dir
}

t.test('reads every module with its shapes, values and resolved scale (matches the reference)', async (t) => {
  const root = t.testdir({ model: {}, lora: {} })
  const config = await buildModel(join(root, 'model'), { arch: 'qwen2', numLayers: 3 })
  await buildLoraAdapter(join(root, 'lora'), {
    model: config,
    rank: 8,
    alpha: 32,
    targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
    rankPattern: { 'layers.2.mlp.down_proj': 4 },
    alphaPattern: { '.*k_proj': 4 },
    layers: [0, 2],
    dtype: 'bfloat16',
  })
  const w = await readLoraAdapter(join(root, 'lora'), 'my/adapter', specOf(config))
  t.equal(w.kind, 'lora')
  t.equal(w.key, 'my/adapter')
  t.equal(w.layers.length, 3)
  t.same(w.layers[1], {})
  t.same(Object.keys(w.layers[0]!).sort(), [
    'down_proj',
    'gate_proj',
    'k_proj',
    'o_proj',
    'q_proj',
    'up_proj',
    'v_proj',
  ])
  const q = w.layers[0]!.q_proj!
  t.equal(q.rank, 8)
  t.equal(q.scale, 32 / 8)
  t.equal(q.a.length, 8 * 64)
  t.equal(q.b.length, 64 * 8)
  t.equal(w.layers[0]!.k_proj!.scale, 4 / 8, 'alpha_pattern')
  t.equal(w.layers[2]!.down_proj!.rank, 4, 'rank_pattern')
  t.equal(w.layers[2]!.down_proj!.scale, 32 / 4)
  t.equal(w.layers[2]!.down_proj!.a.length, 4 * 128)
  t.equal(w.layers[2]!.o_proj!.b.length, 64 * 8)

  const ref = (await ReferenceModel.load(join(root, 'model'))).loadLora(join(root, 'lora'))
  for (const l of [0, 2]) {
    for (const [module, mine] of Object.entries(w.layers[l]!)) {
      const theirs = ref.layers[l]![module as 'q_proj']!
      t.equal(mine.scale, theirs.scale, `${l} ${module} scale`)
      t.same(Array.from(mine.a), Array.from(theirs.a), `${l} ${module} A`)
      t.same(Array.from(mine.b), Array.from(theirs.b), `${l} ${module} B`)
    }
  }
})

t.test('rsLoRA scales by alpha / sqrt(r)', async (t) => {
  const dir = await adapter(t, { rank: 16, alpha: 8, useRslora: true })
  const w = await readLoraAdapter(dir, 'my/adapter', specOf(modelConfig()))
  t.equal(w.layers[0]!.q_proj!.scale, 2)
})

t.test('adapters that do not fit the model are refused, naming the mismatch', async (t) => {
  const spec = specOf(modelConfig())
  await expectInvalid(t, readLoraAdapter(t.testdir(), 'my/adapter', spec), 'adapter_config.json is missing')

  const deeper = await adapter(t, { model: modelConfig(4) })
  await expectInvalid(t, readLoraAdapter(deeper, 'my/adapter', spec), 'targets layer 2, but the model has 2 layers')

  const wider = await adapter(t, { model: modelConfig(2, 128) })
  await expectInvalid(t, readLoraAdapter(wider, 'my/adapter', spec), 'lora_A has shape [8, 128], expected [rank, 64]')

  const mlp = await adapter(t, { targetModules: ['down_proj'], model: { ...modelConfig(), intermediate_size: 100 } })
  await expectInvalid(t, readLoraAdapter(mlp, 'my/adapter', spec), 'intermediate_size')

  const big = await adapter(t, { rank: 128 })
  await expectInvalid(t, readLoraAdapter(big, 'my/adapter', spec), 'rank 128; this server accepts ranks 1 to 64')

  const kv = await adapter(t, { targetModules: ['k_proj'] })
  await expectInvalid(
    t,
    readLoraAdapter(kv, 'my/adapter', { ...spec, numKvHeads: 4 }),
    'expected [64, 8] ([num_kv_heads·head_dim, r])',
  )
})

t.test('adapter_config.json problems', async (t) => {
  const spec = specOf(modelConfig())
  const edit = async (patch: Record<string, unknown>, fragment: string): Promise<void> => {
    const dir = await adapter(t, {})
    const path = join(dir, 'adapter_config.json')
    writeFileSync(path, JSON.stringify({ ...JSON.parse(readFileSync(path, 'utf8')), ...patch }))
    await expectInvalid(t, readLoraAdapter(dir, 'my/adapter', spec), fragment)
  }
  await edit(
    { target_modules: ['q_proj', 'embed_tokens', 'lm_head'] },
    'target_modules "embed_tokens", "lm_head" cannot be adapted',
  )
  await edit({ peft_type: 'PREFIX_TUNING' }, 'only LORA')
  await edit({ use_dora: true }, 'DoRA')
  await edit({ modules_to_save: ['lm_head'] }, 'modules_to_save')
  await edit({ r: 4 }, 'says r = 4')
  await edit({ r: 0 }, 'positive integer')
  await edit({ rank_pattern: { q_proj: 'big' } }, 'rank_pattern')
  await edit({ lora_alpha: 1e308 }, 'lora_alpha is 1e+308, expected > 0 and <= 1000000')
  await edit({ alpha_pattern: { q_proj: 1e308 } }, 'alpha_pattern["q_proj"] is 1e+308')
  const dir = await adapter(t, {})
  writeFileSync(join(dir, 'adapter_config.json'), '{ nope')
  await expectInvalid(t, readLoraAdapter(dir, 'my/adapter', spec), 'not valid JSON')
})

t.test('weight file problems', async (t) => {
  const spec = specOf(modelConfig())
  // A safetensors file renamed to .bin is not a torch.save archive: the restricted reader says so.
  const bin = await adapter(t, {})
  renameSync(join(bin, 'adapter_model.safetensors'), join(bin, 'adapter_model.bin'))
  await expectInvalid(t, readLoraAdapter(bin, 'my/adapter', spec), 'not a zip archive')

  const none = await adapter(t, {})
  renameSync(join(none, 'adapter_model.safetensors'), join(none, 'other.safetensors'))
  await expectInvalid(t, readLoraAdapter(none, 'my/adapter', spec), 'adapter_model.safetensors is missing')

  const write = async (
    tensors: Record<string, [number[], number[] | Float32Array]>,
    fragment: string,
  ): Promise<void> => {
    const dir = await adapter(t, {})
    const all: Record<string, TensorToWrite> = {}
    for (const [name, [shape, data]] of Object.entries(tensors)) {
      all[name] = { dtype: 'F32', shape, data: data instanceof Float32Array ? data : new Float32Array(data) }
    }
    writeSafetensors(join(dir, 'adapter_model.safetensors'), all)
    await expectInvalid(t, readLoraAdapter(dir, 'my/adapter', spec), fragment)
  }
  const p = 'base_model.model.model.layers.0.self_attn.q_proj'
  const a = (): [number[], Float32Array] => [[8, 64], new Float32Array(8 * 64)]
  const b = (): [number[], Float32Array] => [[64, 8], new Float32Array(64 * 8)]
  await write({ [`${p}.lora_A.weight`]: a() }, 'has lora_A but no lora_B')
  await write({}, 'holds no LoRA weights')
  await write(
    { [`${p}.lora_A.weight`]: a(), [`${p}.lora_B.weight`]: b(), 'lm_head.weight': [[1], [0]] },
    'unexpected tensor lm_head.weight',
  )
  await write({ [`${p}.lora_magnitude_vector`]: [[1], [0]] }, 'DoRA')
  const bad = b()
  bad[1][5] = NaN
  await write({ [`${p}.lora_A.weight`]: a(), [`${p}.lora_B.weight`]: bad }, 'non-finite value (NaN) at index 5')
  await write(
    { 'base_model.model.model.layers.0.self_attn.rotary.lora_A.weight': a(), [`${p}.lora_B.weight`]: b() },
    'adapts rotary, which cannot be adapted',
  )

  // The adapter-name infix some trainers save (`lora_A.default.weight`) is accepted.
  const named = await adapter(t, {})
  writeSafetensors(join(named, 'adapter_model.safetensors'), {
    [`${p}.lora_A.default.weight`]: { dtype: 'F32', shape: [8, 64], data: new Float32Array(8 * 64).fill(0.5) },
    [`${p}.lora_B.default.weight`]: { dtype: 'F16', shape: [64, 8], data: new Float32Array(64 * 8).fill(0.25) },
  })
  const w = await readLoraAdapter(named, 'my/adapter', spec)
  t.equal(w.layers[0]!.q_proj!.b[3], 0.25)
  t.equal(w.layers[0]!.q_proj!.scale, 2)
})
