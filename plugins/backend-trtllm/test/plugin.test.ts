/**
 * The plugin's metadata, its options and their translation into executor options, and the startup
 * refusal of an addon built against the fake.
 */
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { Backend, DEFAULT_MEDUSA_CHOICES, LoomError, type PluginContext } from '@loom/core'
import { buildModel } from '@loom/testkit'
import plugin from '../src/index.ts'
import { TrtllmBackend } from '../src/trtllm-backend.ts'
import { executorOptions, parallelMode, trtllmOptionsSchema } from '../src/trtllm-options.ts'
import { resolveWorkerPath, workerPathCandidates } from '../src/worker-path.ts'
import { writeEngineConfig } from './engine-fixture.ts'
import { memoryLogger } from './backend-harness.ts'

/** An executable stand-in for TensorRT-LLM's executorWorker at `file`. */
function fakeWorker(file: string, mode = 0o755): string {
  mkdirSync(join(file, '..'), { recursive: true })
  writeFileSync(file, '#!/bin/sh\n')
  chmodSync(file, mode)
  return file
}

function context(
  configDir: string,
  logs: { level: string; msg: string; obj: object }[] = [],
): PluginContext & { provided: Map<symbol, unknown>; closers: (() => unknown)[] } {
  const provided = new Map<symbol, unknown>()
  const closers: (() => unknown)[] = []
  return {
    provided,
    closers,
    server: { modelPath: configDir, modelId: 'm', cacheDir: configDir, configDir, limits: {} },
    logger: memoryLogger(logs),
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
    parallelMode: 'single',
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
  t.same(executorOptions(full, { ...sizing, medusa: true, workerPath: '/opt/trtllm/bin/executorWorker' }), {
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
    parallelMode: 'orchestrator',
    workerPath: '/opt/trtllm/bin/executorWorker',
    fake: { vocabSize: 500, stepUs: 10, tokensPerStep: 2 },
  })
  // A Medusa engine without a tree in the options gets the native backend's default tree.
  t.equal(
    executorOptions(trtllmOptionsSchema.parse({ engine_dir: 'e' }), { ...sizing, medusa: true }).medusaChoices,
    DEFAULT_MEDUSA_CHOICES,
  )
})

t.test('multi-GPU options: tp × pp > 1 runs in orchestrator mode with the worker path', async (t) => {
  const one = trtllmOptionsSchema.parse({ engine_dir: 'e' })
  t.equal(parallelMode(one), 'single')
  t.equal(parallelMode(trtllmOptionsSchema.parse({ engine_dir: 'e', pipeline_parallel: 2 })), 'orchestrator')
  const four = trtllmOptionsSchema.parse({ engine_dir: 'e', tensor_parallel: 4, worker_path: 'bin/executorWorker' })
  t.equal(parallelMode(four), 'orchestrator')
  t.equal(four.worker_path, 'bin/executorWorker')
  t.notOk(trtllmOptionsSchema.safeParse({ engine_dir: 'e', worker_path: '' }).success, 'an empty worker_path')
  const sizing = { engineDir: '/e', moduleLayersPerAdapter: 0, medusa: false, vocabSize: 10, workerPath: '/w' }
  t.match(executorOptions(four, sizing), { tensorParallel: 4, parallelMode: 'orchestrator', workerPath: '/w' })
  // One GPU: no worker, whatever is configured.
  const single = executorOptions(trtllmOptionsSchema.parse({ engine_dir: 'e', worker_path: '/w' }), sizing)
  t.equal(single.parallelMode, 'single')
  t.equal(single.workerPath, undefined)
})

t.test('worker_path: resolved and checked at startup, a coded error naming the option', async (t) => {
  const dir = t.testdir()
  const given = fakeWorker(join(dir, 'given', 'executorWorker'))
  t.equal(resolveWorkerPath(given, 2, {}), given, 'the option wins')
  const refusal = (fn: () => unknown): LoomError => {
    try {
      fn()
    } catch (err) {
      return err as LoomError
    }
    throw new Error('expected a refusal')
  }
  const missing = refusal(() => resolveWorkerPath(join(dir, 'nope'), 2, { trtllmRoot: dir }))
  t.equal(missing.code, 'native_addon_missing')
  t.equal(missing.param, 'worker_path')
  t.match(missing.message, /`worker_path` .*nope does not exist; tensor_parallel × pipeline_parallel = 2 runs/)
  t.match(missing.message, /Fix: set the plugin option `worker_path`.*README\.md "Multi-GPU"/)
  const plain = fakeWorker(join(dir, 'plain'), 0o644)
  t.match(refusal(() => resolveWorkerPath(plain, 2, {})).message, /`worker_path` .*plain is not executable/)
  t.match(refusal(() => resolveWorkerPath(dir, 2, {})).message, /is not a file/)

  // Defaults: TRTLLM_ROOT/bin (the pip wheel), then beside the library the addon links.
  const wheel = join(dir, 'site-packages', 'tensorrt_llm')
  const library = join(wheel, 'libs', 'libtensorrt_llm.so')
  t.same(workerPathCandidates({ trtllmRoot: wheel, libraryPath: library }), [
    join(wheel, 'bin', 'executorWorker'),
    join(wheel, 'libs', 'executorWorker'),
    join(wheel, 'libs', 'executor_worker', 'executorWorker'),
  ])
  const none = refusal(() => resolveWorkerPath(undefined, 4, { trtllmRoot: wheel, libraryPath: library }))
  t.equal(none.param, 'worker_path')
  t.match(none.message, /`worker_path` is not set and none of .*bin\/executorWorker, .* is an executable file/)
  t.match(
    refusal(() => resolveWorkerPath(undefined, 4, {})).message,
    /`worker_path` is not set and TRTLLM_ROOT is not set and the addon does not link TensorRT-LLM/,
  )
  const installed = fakeWorker(join(wheel, 'bin', 'executorWorker'))
  t.equal(resolveWorkerPath(undefined, 4, { trtllmRoot: wheel }), installed, 'under TRTLLM_ROOT')
  t.equal(resolveWorkerPath(undefined, 4, { libraryPath: library }), installed, 'beside the library (libs/ → bin/)')
  const buildTree = join(dir, 'cpp', 'build', 'tensorrt_llm')
  const built = fakeWorker(join(buildTree, 'executor_worker', 'executorWorker'))
  t.equal(
    resolveWorkerPath(undefined, 2, { libraryPath: join(buildTree, 'libtensorrt_llm.so') }),
    built,
    'a build tree',
  )
})

t.test(
  'multi-GPU through the plugin: worker_path is relative to the configuration, the executor gets it',
  async (t) => {
    const dir = t.testdir()
    const model = await buildModel(join(dir, 'model'), { numLayers: 1, hiddenSize: 16, intermediateSize: 16 })
    writeEngineConfig(join(dir, 'engine'), model, { tpSize: 2, ppSize: 2 })
    const worker = fakeWorker(join(dir, 'trtllm', 'bin', 'executorWorker'))
    const logs: { level: string; msg: string; obj: object }[] = []
    const ctx = context(dir, logs)
    const options = { engine_dir: 'engine', allow_fake: true, tensor_parallel: 2, pipeline_parallel: 2 }
    await plugin.register(ctx, trtllmOptionsSchema.parse({ ...options, worker_path: 'trtllm/bin/executorWorker' }))
    const backend = ctx.provided.get(Backend) as TrtllmBackend
    await backend.start()
    t.match(logs.find((l) => l.msg === 'TensorRT-LLM executor ready')?.obj, {
      parallelMode: 'orchestrator',
      ranks: 4,
      workerPath: worker,
    })
    for (const close of ctx.closers) await close()

    // Missing: refused at start, before the engine loads, naming the option.
    const missing = context(dir)
    await plugin.register(missing, trtllmOptionsSchema.parse({ ...options, worker_path: 'trtllm/executorWorker' }))
    const refused = missing.provided.get(Backend) as TrtllmBackend
    await t.rejects(refused.start(), {
      code: 'native_addon_missing',
      param: 'worker_path',
      message: new RegExp(`\`worker_path\` ${join(dir, 'trtllm', 'executorWorker')} does not exist`),
    })
    for (const close of missing.closers) await close()
  },
)
