/**
 * `@loom/backend-cuda-native`: a `StepRunner` over Loom's own C++ runtime (node-addon-api).
 * It runs on the `cpu` device (AVX-512 or AVX2/FMA kernels on a thread pool) or, where the build
 * found nvcc and a GPU is present, the `cuda` device (`device: auto | cpu | cuda`).
 */
import { StepRunner, definePlugin } from '@loom/core'
import { NativeStepRunner } from './native-step-runner.ts'
import { nativeOptionsSchema } from './runner-options.ts'

export { NativeStepRunner } from './native-step-runner.ts'
export { loadNative, ADDON_PATH, type NativeDeviceOption } from './load-native.ts'
export { nativeOptionsSchema, type NativeOptions, type NativeOptionsInput } from './runner-options.ts'

export default definePlugin({
  name: '@loom/backend-cuda-native',
  provides: ['StepRunner'],
  options: nativeOptionsSchema,
  register(ctx, opts) {
    const runner = new NativeStepRunner(ctx.server.modelPath, opts, {
      // The startup log says which device `auto` chose (and /info's model_device_type shows it).
      onLoaded: (spec) => ctx.logger.info({ device: spec.device, requested: opts.device }, 'native runtime device'),
    })
    ctx.provide(StepRunner, runner)
    ctx.onClose(() => runner.close())
  },
})
