/**
 * Loads the TensorRT-LLM addon (`build/Release/loom_trtllm.node`) once per process and wraps it so every
 * error is a `LoomError`. `capabilities.impl` says which implementation is linked: the Backend refuses
 * to start on `'fake'` unless a test option allows it.
 */
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { isLoomError, LoomError } from '@loom/core'
import type {
  NativeExecutor,
  NativeExecutorInfo,
  NativeExecutorOptions,
  NativeRequest,
  NativeResponsesCallback,
  NativeStats,
  TrtllmAddon,
} from './native-api.ts'

const pluginDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
/** Where scripts/build.mjs puts the addon. */
export const TRTLLM_ADDON_PATH = path.join(pluginDir, 'build', 'Release', 'loom_trtllm.node')

const BUILD_FIX =
  'run `node plugins/backend-trtllm/scripts/build.mjs` (needs a C++17 compiler, make and python3); ' +
  'set TRTLLM_ROOT to build against TensorRT-LLM (README "Building the native addon")'

/** The addon as compiled: errors are plain Errors with a Loom `code` and a `nativeStatus`. */
type RawAddon = TrtllmAddon

/** Turn an error of the addon (an Error with a Loom `code`) into a LoomError with that code's params. */
export function fromNativeError(err: unknown, engineDir = ''): LoomError {
  if (isLoomError(err)) return err
  const e = err as (Error & { code?: string; nativeStatus?: string }) | undefined
  const detail = e?.message ?? String(err)
  switch (e?.code) {
    case 'server_closing':
      return new LoomError('server_closing', {}, { cause: err })
    case 'overloaded':
      return new LoomError('overloaded', { detail }, { cause: err })
    case 'grammar_unsupported':
      return new LoomError('grammar_unsupported', { detail }, { cause: err })
    case 'model_invalid':
      return new LoomError('model_invalid', { path: engineDir, detail }, { cause: err })
    default:
      return new LoomError('native_error', { detail }, { cause: err })
  }
}

/** The executor with its methods' errors converted; the raw object stays private. */
class WrappedExecutor implements NativeExecutor {
  private closing: Promise<void> | undefined
  constructor(private readonly raw: NativeExecutor) {}

  enqueue(request: NativeRequest): number {
    try {
      return this.raw.enqueue(request)
    } catch (err) {
      throw fromNativeError(err)
    }
  }

  cancel(requestId: number): void {
    try {
      this.raw.cancel(requestId)
    } catch (err) {
      throw fromNativeError(err)
    }
  }

  stats(): NativeStats {
    try {
      return this.raw.stats()
    } catch (err) {
      throw fromNativeError(err)
    }
  }

  info(): NativeExecutorInfo {
    return this.raw.info()
  }

  shutdown(): Promise<void> {
    if (this.closing) return this.closing
    try {
      this.closing = this.raw.shutdown().catch((err: unknown) => Promise.reject(fromNativeError(err)))
    } catch (err) {
      this.closing = Promise.reject(fromNativeError(err))
    }
    return this.closing
  }
}

function wrap(raw: RawAddon): TrtllmAddon {
  return {
    capabilities: Object.freeze({ ...raw.capabilities }),
    async create(options: NativeExecutorOptions, onResponses: NativeResponsesCallback): Promise<NativeExecutor> {
      try {
        return new WrappedExecutor(await raw.create(options, onResponses))
      } catch (err) {
        throw fromNativeError(err, options.engineDir)
      }
    },
  }
}

let cached: TrtllmAddon | undefined

/**
 * Load the addon once per process. A missing or unloadable binary throws `native_addon_missing`
 * naming the likely causes and the fix.
 */
export function loadTrtllm(addonPath = TRTLLM_ADDON_PATH): TrtllmAddon {
  if (cached && addonPath === TRTLLM_ADDON_PATH) return cached
  if (!existsSync(addonPath)) {
    throw new LoomError('native_addon_missing', {
      detail:
        `${addonPath} does not exist. Likely causes: the packages were installed with --ignore-scripts, or the ` +
        `root postinstall's build of @loom/backend-trtllm failed (no C++ compiler, make or python3, or a ` +
        `TRTLLM_ROOT that does not hold TensorRT-LLM). Fix: ${BUILD_FIX}.`,
    })
  }
  let addon: TrtllmAddon
  try {
    addon = wrap(createRequire(import.meta.url)(addonPath) as RawAddon)
  } catch (err) {
    throw new LoomError(
      'native_addon_missing',
      {
        detail:
          `${addonPath} exists but cannot be loaded (${(err as Error).message}). Likely causes: it was built for ` +
          `another Node.js version, or libtensorrt_llm.so (or a library it needs: TensorRT, CUDA, MPI) is not on ` +
          `the loader's path, or the C++ ABI flag does not match the library (TRTLLM_CXX11_ABI). Fix: ${BUILD_FIX}.`,
      },
      { cause: err },
    )
  }
  if (addonPath === TRTLLM_ADDON_PATH) cached = addon
  return addon
}

/**
 * Refuse the fake where TensorRT-LLM is required: throws `native_addon_missing` naming TRTLLM_ROOT and
 * the README section, unless `allowFake` (a test option) is set.
 */
export function requireTensorrtLlm(addon: TrtllmAddon, allowFake: boolean): void {
  if (addon.capabilities.impl === 'tensorrt-llm' || allowFake) return
  throw new LoomError('native_addon_missing', {
    detail:
      `${TRTLLM_ADDON_PATH} was built against the fake executor, not TensorRT-LLM (TRTLLM_ROOT was not set at ` +
      `build time). Fix: set TRTLLM_ROOT to a TensorRT-LLM installation and rebuild, as ` +
      `plugins/backend-trtllm/README.md "Building the native addon" explains.`,
  })
}
