/**
 * `@loom/backend-cuda-native`: a `StepRunner` over Loom's own C++ runtime (node-addon-api).
 * Today it runs on the `cpu` device (AVX2/FMA kernels on a thread pool); the `cuda` device plugs
 * into the same model graph later.
 */
import { StepRunner, definePlugin } from '@loom/core'
import { NativeStepRunner } from './native-step-runner.ts'
import { nativeOptionsSchema } from './runner-options.ts'

export { NativeStepRunner } from './native-step-runner.ts'
export { loadNative, ADDON_PATH, type KernelSelfTestResult } from './load-native.ts'
export { nativeOptionsSchema, type NativeOptions, type NativeOptionsInput } from './runner-options.ts'

export default definePlugin({
  name: '@loom/backend-cuda-native',
  provides: ['StepRunner'],
  options: nativeOptionsSchema,
  register(ctx, opts) {
    const runner = new NativeStepRunner(ctx.server.modelPath, opts)
    ctx.provide(StepRunner, runner)
    ctx.onClose(() => runner.close())
  },
})
