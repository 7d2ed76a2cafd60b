import t from 'tap'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildModel, buildLoraAdapter } from '../src/model-builder.ts'
import { ReferenceModel, mergeLoraIntoModel, readModelTensors, argmax } from '../src/reference-model.ts'
import { readSafetensors } from '../src/safetensors-reader.ts'

const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  let m = 0
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!))
  return m
}

const prompt = [370, 72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]

t.test('writes a Hugging Face folder with HF names and shapes', async (t) => {
  const dir = t.testdir()
  const config = await buildModel(dir, { arch: 'qwen2', numLayers: 3, generationEosTokenIds: [371, 372] })
  for (const f of [
    'config.json',
    'generation_config.json',
    'tokenizer.json',
    'tokenizer_config.json',
    'model.safetensors',
  ]) {
    t.ok(existsSync(join(dir, f)), f)
  }
  t.same(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')), config)
  t.same(config.architectures, ['Qwen2ForCausalLM'])
  t.equal(JSON.parse(readFileSync(join(dir, 'generation_config.json'), 'utf8')).eos_token_id.length, 2)
  const { tensors } = readSafetensors(join(dir, 'model.safetensors'))
  t.same(tensors.get('model.layers.2.self_attn.k_proj.weight')!.shape, [32, 64])
  t.same(tensors.get('model.layers.2.self_attn.k_proj.bias')!.shape, [32])
  t.same(tensors.get('model.layers.0.mlp.down_proj.weight')!.shape, [64, 128])
  t.same(tensors.get('lm_head.weight')!.shape, [config.vocab_size, 64])
  t.notOk(tensors.has('model.layers.0.self_attn.o_proj.bias'))
  t.equal(tensors.size, 1 + 3 * (2 + 7 + 3) + 1 + 1)
})

t.test('sharded equals unsharded; seeds and dtypes behave', async (t) => {
  const a = t.testdir({ one: {}, three: {}, bf16: {}, other: {} })
  await buildModel(join(a, 'one'), { numLayers: 2, seed: 3 })
  await buildModel(join(a, 'three'), { numLayers: 2, seed: 3, shards: 3 })
  await buildModel(join(a, 'bf16'), { numLayers: 2, seed: 3, dtype: 'bfloat16' })
  await buildModel(join(a, 'other'), { numLayers: 2, seed: 4 })
  const index = JSON.parse(readFileSync(join(a, 'three', 'model.safetensors.index.json'), 'utf8'))
  t.same(new Set(Object.values(index.weight_map)), new Set([1, 2, 3].map((i) => `model-0000${i}-of-00003.safetensors`)))
  const one = readModelTensors(join(a, 'one'))
  const three = readModelTensors(join(a, 'three'))
  t.same([...one.keys()].sort(), [...three.keys()].sort())
  for (const [name, x] of one) t.equal(maxAbsDiff(x.data, three.get(name)!.data), 0, name)
  const m1 = await ReferenceModel.load(join(a, 'one'))
  const m3 = await ReferenceModel.load(join(a, 'three'))
  t.same(m1.newSequence().forward(prompt), m3.newSequence().forward(prompt))
  const lBf = (await ReferenceModel.load(join(a, 'bf16'))).newSequence().forward(prompt).at(-1)!
  const l1 = m1.newSequence().forward(prompt).at(-1)!
  t.ok(maxAbsDiff(lBf, l1) < 0.3 && maxAbsDiff(lBf, l1) > 0, 'bf16 is close to, not equal to, f32')
  const lOther = (await ReferenceModel.load(join(a, 'other'))).newSequence().forward(prompt).at(-1)!
  t.ok(maxAbsDiff(lOther, l1) > 1, 'another seed is another model')
})

t.test('an unknown dtype is refused before anything is written', async (t) => {
  const dir = join(t.testdir(), 'model')
  await t.rejects(buildModel(dir, { dtype: 'f32' as 'float32' }), {
    name: 'TypeError',
    message: `dtype must be 'float32', 'float16' or 'bfloat16'; received "f32"`,
  })
  t.notOk(existsSync(dir), 'no folder written')
})

t.test('activations stay O(1) in deep models and logits are informative', async (t) => {
  const dir = t.testdir()
  const config = await buildModel(dir, { numLayers: 8, hiddenSize: 128, numHeads: 8, numKvHeads: 2 })
  const m = await ReferenceModel.load(dir)
  const s = m.newSequence()
  const logits = s.forward(prompt)
  for (const l of logits) {
    const mean = l.reduce((x, y) => x + y, 0) / l.length
    const std = Math.sqrt(l.reduce((x, y) => x + (y - mean) ** 2, 0) / l.length)
    t.ok(std > 0.5 && std < 10, `logit std ${std.toFixed(2)}`)
    const sorted = [...l].sort((x, y) => y - x)
    t.ok(sorted[0]! - sorted[1]! < 10, 'not one-hot')
  }
  const out = s.generateGreedy([], 20)
  t.equal(out.length, 20)
  t.ok(new Set(out).size > 3, `greedy output varies: ${out.join(' ')}`)
  t.equal(config.num_hidden_layers, 8)
})

t.test('LoRA changes outputs and equals the merged model', async (t) => {
  const dir = t.testdir({ model: {}, lora: {}, merged: {}, rs: {} })
  const config = await buildModel(join(dir, 'model'), { numLayers: 2, seed: 1 })
  const adapter = await buildLoraAdapter(join(dir, 'lora'), {
    model: config,
    rank: 4,
    alpha: 8,
    targetModules: ['q_proj', 'v_proj', 'o_proj', 'gate_proj', 'down_proj'],
    rankPattern: { 'layers.1.mlp.down_proj': 2 },
    alphaPattern: { gate_proj: 16 },
    seed: 9,
  })
  t.equal(adapter.peft_type, 'LORA')
  const st = readSafetensors(join(dir, 'lora', 'adapter_model.safetensors')).tensors
  t.same(st.get('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')!.shape, [4, 64])
  t.same(st.get('base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight')!.shape, [64, 4])
  t.same(st.get('base_model.model.model.layers.1.mlp.down_proj.lora_A.weight')!.shape, [2, 128])
  t.same(st.get('base_model.model.model.layers.0.mlp.down_proj.lora_A.weight')!.shape, [4, 128])

  const m = await ReferenceModel.load(join(dir, 'model'))
  const lora = m.loadLora(join(dir, 'lora'))
  t.equal(lora.layers[1]!.down_proj!.scale, 8 / 2)
  t.equal(lora.layers[0]!.gate_proj!.scale, 16 / 4)
  t.equal(lora.layers[0]!.q_proj!.scale, 8 / 4)

  const base = m.newSequence().forward(prompt)
  const withLora = m.newSequence(join(dir, 'lora')).forward(prompt)
  t.ok(maxAbsDiff(base.at(-1)!, withLora.at(-1)!) > 0.5, 'adapter moves logits')

  await mergeLoraIntoModel(join(dir, 'model'), join(dir, 'lora'), join(dir, 'merged'))
  const merged = (await ReferenceModel.load(join(dir, 'merged'))).newSequence().forward(prompt)
  for (let i = 0; i < prompt.length; i++) t.ok(maxAbsDiff(merged[i]!, withLora[i]!) < 1e-4, `token ${i}`)
  t.ok(existsSync(join(dir, 'merged', 'tokenizer.json')))

  await buildLoraAdapter(join(dir, 'rs'), {
    model: join(dir, 'model'),
    rank: 16,
    alpha: 8,
    useRslora: true,
    layers: [1],
  })
  const rs = m.loadLora(join(dir, 'rs'))
  t.equal(rs.layers[1]!.q_proj!.scale, 2)
  t.same(rs.layers[0], {})
})

t.test('prefill then 20 decode steps equals one long prefill; clone forks the cache', async (t) => {
  const dir = t.testdir()
  await buildModel(dir, {
    arch: 'mistral',
    tieWordEmbeddings: true,
    ropeScaling: {
      rope_type: 'llama3',
      factor: 8,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 64,
    },
  })
  const m = await ReferenceModel.load(dir)
  const s = m.newSequence()
  const gen = s.generateGreedy(prompt, 20)
  const all = m.newSequence().forward([...prompt, ...gen.slice(0, -1)])
  for (let i = 0; i < gen.length; i++) t.equal(argmax(all[prompt.length - 1 + i]!), gen[i])
  const fork = s.clone()
  t.same(fork.forward([5]), s.forward([5]))
  t.equal(s.length, prompt.length + 20)
})
