// Failures are coded LoomErrors, never crashes: unsupported models, bad steps, full slots, close.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import plugin, { NativeStepRunner } from '../src/index.ts'

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
    await t.rejects(runner.step({ rows: [], kvCopies: [] }), { code: 'backend_not_ready' })
    const spec = await runner.load()
    const row = {
      seqId: 1,
      tokens: Int32Array.of(spec.vocabSize + 5),
      positions: Int32Array.of(0),
      cacheLen: 0,
      blockTable: Int32Array.of(0),
      loraSlot: -1,
      logitIndices: Int32Array.of(0),
      medusaSlot: -1,
      medusaIndices: new Int32Array(0),
    }
    await t.rejects(runner.step({ rows: [row], kvCopies: [] }), {
      code: 'native_error',
      message: /outside the vocabulary/,
    })
    await t.rejects(
      runner.step({ rows: [{ ...row, tokens: Int32Array.of(1), blockTable: Int32Array.of(999) }], kvCopies: [] }),
      {
        code: 'native_error',
        message: /block id 999/,
      },
    )
    await t.rejects(runner.step({ rows: [{ ...row, tokens: Int32Array.of(1), loraSlot: 0 }], kvCopies: [] }), {
      message: /holds no LoRA adapter/,
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
    const out = await runner.step({ rows: [{ ...row, tokens: Int32Array.of(1), loraSlot: 0 }], kvCopies: [] })
    t.equal(out.logits.length, spec.vocabSize)
    await runner.close()
    await runner.close()
    await t.rejects(runner.step({ rows: [], kvCopies: [] }), { code: 'server_closing' })
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
