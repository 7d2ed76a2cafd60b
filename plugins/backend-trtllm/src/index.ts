/**
 * `@loom/backend-trtllm`: a request-level `Backend` on TensorRT-LLM's C++ Executor, bound through
 * Loom's own C ABI and a node-addon-api addon. The executor batches in flight, caches LoRA weights
 * by task id, runs Medusa heads built into the engine and, on builds that have it, guided decoding.
 *
 * Registering loads the addon and checks that it links TensorRT-LLM (an addon built against the
 * fake executor fails here, unless the test option `allow_fake` is set); `start()` reads the
 * engine's `config.json` and starts the executor.
 */
import path from 'node:path'
import { Backend, definePlugin } from '@loom/core'
import { loadTrtllm, requireTensorrtLlm } from './load-native.ts'
import { TrtllmBackend } from './trtllm-backend.ts'
import { trtllmOptionsSchema } from './trtllm-options.ts'

export { TrtllmBackend, type TrtllmBackendInit } from './trtllm-backend.ts'
export { trtllmOptionsSchema, type TrtllmOptions, type TrtllmOptionsInput } from './trtllm-options.ts'
export { resolveWorkerPath, workerPathCandidates, EXECUTOR_WORKER } from './worker-path.ts'
export { toTrtllmLora, TRTLLM_LORA_MODULES, type TrtllmLoraTensors } from './lora-layout.ts'
export { loraTaskId } from './lora-task-id.ts'

export default definePlugin({
  name: '@loom/backend-trtllm',
  provides: ['Backend'],
  options: trtllmOptionsSchema,
  register(ctx, options) {
    const addon = loadTrtllm()
    requireTensorrtLlm(addon, options.allow_fake)
    const backend = new TrtllmBackend({
      addon,
      engineDir: path.resolve(ctx.server.configDir, options.engine_dir),
      modelDir: ctx.server.modelPath,
      // worker_path is relative to the configuration file, like engine_dir.
      options:
        options.worker_path === undefined
          ? options
          : { ...options, worker_path: path.resolve(ctx.server.configDir, options.worker_path) },
      logger: ctx.logger,
    })
    ctx.provide(Backend, backend)
    ctx.onClose(() => backend.close())
  },
})
