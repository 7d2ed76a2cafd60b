/**
 * The plugin's metadata, its options and their translation into executor options, and the startup
 * refusal of an addon built against the fake.
 */
import { join } from 'node:path'
import t from 'tap'
import { Backend, DEFAULT_MEDUSA_CHOICES, LoomError, type PluginContext } from '@loom/core'
import { buildModel } from '@loom/testkit'
import plugin from '../src/index.ts'
import { TrtllmBackend } from '../src/trtllm-backend.ts'
import { executorOptions, trtllmOptionsSchema } from '../src/trtllm-options.ts'
import { writeEngineConfig } from './engine-fixture.ts'
import { memoryLogger } from './backend-harness.ts'

function context(configDir: string): PluginContext & { provided: Map<symbol, unknown>; closers: (() => unknown)[] } {
  const provided = new Map<symbol, unknown>()
  const closers: (() => unknown)[] = []
  return {
    provided,
    closers,
    server: { modelPath: configDir, modelId: 'm', cacheDir: configDir, configDir, limits: {} },
    logger: memoryLogger(),
    provide: (token, implementation) => void provided.set(token, implementation),
    onClose: (fn) => void closers.push(fn),
  }
}

t.test('metadata', async (t) => {
  t.equal(plugin.name, '@loom/backend-trtllm')
  t.same(plugin.provides, ['Backend'])
})

t.test('an addon built against the fake is refused at startup unless allow_fake is set', async (t) => {
  const dir = t.testdir()
  const ctx = context(dir)
  let error: unknown
  try {
    await plugin.register(ctx, trtllmOptionsSchema.parse({ engine_dir: 'engine' }))
  } catch (err) {
    error = err
  }
  t.ok(error instanceof LoomError)
  t.equal((error as LoomError).code, 'native_addon_missing')
  t.match((error as LoomError).message, /TRTLLM_ROOT/)
  t.match((error as LoomError).message, /README\.md "Building the native addon"/)
  t.equal(ctx.provided.size, 0)
})

t.test('with allow_fake it provides the Backend; engine_dir is relative to the configuration', async (t) => {
  const dir = t.testdir()
  const model = await buildModel(join(dir, 'model'), { numLayers: 1, hiddenSize: 16, intermediateSize: 16 })
  writeEngineConfig(join(dir, 'engines', 'llama'), model)
  const ctx = context(dir)
  await plugin.register(ctx, trtllmOptionsSchema.parse({ engine_dir: 'engines/llama', allow_fake: true }))
  const backend = ctx.provided.get(Backend) as TrtllmBackend
  t.ok(backend instanceof TrtllmBackend)
  await backend.start()
  t.equal(backend.capabilities().vocabSize, model.vocab_size, 'found the engine under the configuration directory')
  for (const close of ctx.closers) await close()
})

t.test('options: defaults, and what is refused', async (t) => {
  const parsed = trtllmOptionsSchema.parse({ engine_dir: '/e' })
  t.match(parsed, {
    kv_cache: { free_gpu_memory_fraction: 0.9, enable_block_reuse: false },
    enable_chunked_context: false,
    lora_cache: { wait_s: 30 },
    tensor_parallel: 1,
    pipeline_parallel: 1,
    guided_decoding: false,
    allow_fake: false,
  })
  t.notOk(trtllmOptionsSchema.safeParse({}).success, 'engine_dir is required')
  t.notOk(trtllmOptionsSchema.safeParse({ engine_dir: '/e', enigne: 1 }).success, 'unknown keys')
  t.notOk(trtllmOptionsSchema.safeParse({ engine_dir: '/e', kv_cache: { free_gpu_memory_fraction: 1.5 } }).success)
  t.notOk(trtllmOptionsSchema.safeParse({ engine_dir: '/e', medusa_choices: [[]] }).success)
  const devices = trtllmOptionsSchema.safeParse({ engine_dir: '/e', tensor_parallel: 2, device_ids: [0] })
  t.notOk(devices.success)
  t.match(JSON.stringify(devices.error?.issues), /one device per rank/)
  t.ok(trtllmOptionsSchema.safeParse({ engine_dir: '/e', tensor_parallel: 2, device_ids: [2, 3] }).success)
})

t.test('options → executor options', async (t) => {
  const sizing = { engineDir: '/abs/engine', moduleLayersPerAdapter: 14, medusa: false, vocabSize: 500 }
  t.same(executorOptions(trtllmOptionsSchema.parse({ engine_dir: 'e' }), sizing), {
    engineDir: '/abs/engine',
    kvCacheFreeGpuMemoryFraction: 0.9,
    enableKvCacheBlockReuse: false,
    enableChunkedContext: false,
    tensorParallel: 1,
    pipelineParallel: 1,
    fake: { vocabSize: 500 },
  })
  const full = trtllmOptionsSchema.parse({
    engine_dir: 'e',
    max_batch_size: 64,
    max_num_tokens: 8192,
    max_queue_size: 100,
    kv_cache: { free_gpu_memory_fraction: 0.8, max_tokens: 100000, enable_block_reuse: true },
    enable_chunked_context: true,
    lora_cache: { max_adapters: 10, host_mb: 2, device_fraction: 0.05 },
    medusa_choices: [[0], [0, 0]],
    tensor_parallel: 2,
    pipeline_parallel: 2,
    device_ids: [0, 1, 2, 3],
    fake: { step_us: 10, tokens_per_step: 2 },
  })
  t.same(executorOptions(full, { ...sizing, medusa: true }), {
    engineDir: '/abs/engine',
    maxBatchSize: 64,
    maxNumTokens: 8192,
    maxQueueSize: 100,
    kvCacheFreeGpuMemoryFraction: 0.8,
    kvCacheMaxTokens: 100000,
    enableKvCacheBlockReuse: true,
    enableChunkedContext: true,
    loraCacheHostModuleLayers: 140,
    loraCacheHostBytes: 2 * 1024 * 1024,
    loraCacheDevicePercent: 0.05,
    medusaChoices: [[0], [0, 0]],
    tensorParallel: 2,
    pipelineParallel: 2,
    deviceIds: [0, 1, 2, 3],
    fake: { vocabSize: 500, stepUs: 10, tokensPerStep: 2 },
  })
  // A Medusa engine without a tree in the options gets the native backend's default tree.
  t.equal(
    executorOptions(trtllmOptionsSchema.parse({ engine_dir: 'e' }), { ...sizing, medusa: true }).medusaChoices,
    DEFAULT_MEDUSA_CHOICES,
  )
})
