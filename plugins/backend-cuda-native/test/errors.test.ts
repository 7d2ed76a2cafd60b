// Failures are coded LoomErrors, never crashes: unsupported models, bad steps, full slots, close.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import type { MedusaWeights, StepRow } from '@loom/core'
import plugin, { NativeStepRunner } from '../src/index.ts'
import { batchOf, GREEDY_TOP, TOP_LOGPROBS } from './helpers.ts'

t.test('errors', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-err-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await buildModel(dir, { arch: 'llama', hiddenSize: 32, numLayers: 1, numHeads: 2, numKvHeads: 1 })

  t.test('unsupported architecture', async (t) => {
    const other = path.join(dir, 'other')
    await buildModel(other, { hiddenSize: 32, numLayers: 1, numHeads: 2, numKvHeads: 1 })
    const cfg = JSON.parse(await readFile(path.join(other, 'config.json'), 'utf8'))
    cfg.architectures = ['GPT2LMHeadModel']
    await writeFile(path.join(other, 'config.json'), JSON.stringify(cfg))
    const runner = new NativeStepRunner(other, { threads: 1 })
    await t.rejects(runner.load(), { code: 'model_invalid', message: /GPT2LMHeadModel is not supported/ })
    await runner.close()
  })

  t.test('missing tensor', async (t) => {
    const other = path.join(dir, 'shapes')
    await buildModel(other, { hiddenSize: 32, numLayers: 1, numHeads: 2, numKvHeads: 1 })
    const cfg = JSON.parse(await readFile(path.join(other, 'config.json'), 'utf8'))
    cfg.num_hidden_layers = 2
    await writeFile(path.join(other, 'config.json'), JSON.stringify(cfg))
    const runner = new NativeStepRunner(other, { threads: 1 })
    await t.rejects(runner.load(), { code: 'model_invalid', message: /model\.layers\.1\..* is missing/ })
    await runner.close()
  })

  t.test('bad steps and slots', async (t) => {
    const runner = new NativeStepRunner(dir, { threads: 2, kv_cache_tokens: 64, adapter_slots: 1 })
    await t.rejects(runner.step(batchOf([])), { code: 'backend_not_ready' })
    const spec = await runner.load()
    const row: StepRow = {
      seqId: 1,
      tokens: Int32Array.of(spec.vocabSize + 5),
      positions: Int32Array.of(0),
      cacheLen: 0,
      blockTable: Int32Array.of(0),
      loraSlot: -1,
      sampling: GREEDY_TOP,
      scoreTargets: new Int32Array(0),
      medusaSlot: -1,
      medusaHeads: 0,
    }
    const ok1 = { ...row, tokens: Int32Array.of(1) }
    await t.rejects(runner.step(batchOf([row])), {
      code: 'native_error',
      message: /outside the vocabulary/,
    })
    await t.rejects(runner.step(batchOf([{ ...ok1, blockTable: Int32Array.of(999) }])), {
      code: 'native_error',
      message: /block id 999/,
    })
    await t.rejects(runner.step(batchOf([{ ...ok1, loraSlot: 0 }])), {
      message: /holds no LoRA adapter/,
    })
    // The sampling fields: a row's top logprobs fit the batch's width, heads need a Medusa slot,
    // a sampled position is never scored, and a step returns at least one draft id per head.
    await t.rejects(runner.step({ ...batchOf([ok1]), topLogprobs: 5 }), {
      code: 'native_error',
      message: new RegExp(`topLogprobs ${TOP_LOGPROBS} outside \\[0, 5\\]`),
    })
    await t.rejects(runner.step(batchOf([{ ...ok1, medusaSlot: 0, medusaHeads: 1 }])), {
      code: 'native_error',
      message: /medusaSlot 0 holds no Medusa heads/,
    })
    await t.rejects(runner.step(batchOf([{ ...ok1, scoreTargets: Int32Array.of(3) }])), {
      code: 'native_error',
      message: /a sampled position is never scored/,
    })
    await t.rejects(runner.step(batchOf([ok1], 0)), {
      code: 'native_error',
      message: /draftTopK must be in \[1, 1024\]/,
    })
    const lora = {
      kind: 'lora' as const,
      key: 'k',
      layers: [{ q_proj: { rank: 2, scale: 1, a: new Float32Array(2 * 32), b: new Float32Array(10) } }],
    }
    await t.rejects(runner.loadAdapter(lora), {
      code: 'adapter_invalid',
      message: /q_proj B: expected Float32Array \[32, 2\]/,
    })
    const ok = {
      ...lora,
      layers: [{ q_proj: { rank: 2, scale: 1, a: new Float32Array(64), b: new Float32Array(64) } }],
    }
    t.equal(await runner.loadAdapter(ok), 0)
    await t.rejects(runner.loadAdapter(ok), { code: 'adapter_slots_full' })
    // A LoRA slot is no Medusa slot.
    await t.rejects(runner.step(batchOf([{ ...ok1, medusaSlot: 0, medusaHeads: 1 }])), {
      message: /medusaSlot 0 holds no Medusa heads/,
    })
    // After the refused steps the runner still steps: one greedy token and its top logprobs.
    const out = await runner.step(batchOf([{ ...ok1, loraSlot: 0 }]))
    t.equal(out.tokens.length, 1)
    t.ok(out.tokens[0]! >= 0 && out.tokens[0]! < spec.vocabSize, `token ${out.tokens[0]} in the vocabulary`)
    t.equal(out.topIds.length, TOP_LOGPROBS)
    t.equal(out.topIds[0], out.tokens[0], 'greedy picks the best top id')
    t.same(Array.from(out.walkEnds), [-1], 'a causal row has no walk end')
    t.equal(out.draftIds.length, 0)

    // Medusa heads run where a row samples: a row that samples nothing may not ask for them.
    await runner.unloadAdapter(0)
    const H = spec.hiddenSize
    const heads: MedusaWeights = {
      kind: 'medusa',
      key: 'm',
      numHeads: 2,
      numLayers: 1,
      heads: [0, 1].map(() => ({ blocks: [{ weight: new Float32Array(H * H), bias: new Float32Array(H) }] })),
    }
    t.equal(await runner.loadAdapter(heads), 0)
    await t.rejects(runner.step(batchOf([{ ...ok1, sampling: null, medusaSlot: 0, medusaHeads: 2 }])), {
      code: 'native_error',
      message: /Medusa heads run where a row samples; this row samples nothing/,
    })
    await t.rejects(runner.step(batchOf([{ ...ok1, medusaSlot: 0, medusaHeads: 2, loraSlot: 0 }])), {
      message: /loraSlot 0 holds no LoRA adapter/,
    })
    // A row runs 1 to the slot's heads.
    for (const medusaHeads of [0, 3, -1])
      await t.rejects(runner.step(batchOf([{ ...ok1, medusaSlot: 0, medusaHeads }])), {
        code: 'native_error',
        message: new RegExp(`medusaHeads ${medusaHeads} outside \\[1, 2\\], the heads of slot 0`),
      })
    const drafted = await runner.step(batchOf([{ ...ok1, medusaSlot: 0, medusaHeads: 2 }], 3))
    t.equal(drafted.draftIds.length, 2 * 3, '[heads, draftTopK] ids')
    // Zero residual blocks over the base lm_head: each head's best id is the row's greedy token.
    t.same([drafted.draftIds[0], drafted.draftIds[3]], [drafted.tokens[0], drafted.tokens[0]])
    const first = await runner.step(batchOf([{ ...ok1, medusaSlot: 0, medusaHeads: 1 }], 3))
    t.same(Array.from(first.draftIds), Array.from(drafted.draftIds.subarray(0, 3)), 'the first head alone: its ids')
    await runner.close()
    await runner.close()
    await t.rejects(runner.step(batchOf([])), { code: 'server_closing' })
  })

  t.test('plugin metadata and options', async (t) => {
    t.equal(plugin.name, '@loom/backend-cuda-native')
    t.same(plugin.provides, ['StepRunner'])
    t.equal(plugin.options.parse({}).device, 'auto')
    t.equal(plugin.options.parse({ device: 'cuda' }).device, 'cuda')
    t.throws(() => plugin.options.parse({ device: 'tpu' }))
    t.throws(() => plugin.options.parse({ max_lora_rank: 256 }))
  })
})
