/**
 * Loads the compiled addon (`build/Release/loom_native.node`) and describes its JS surface.
 * A missing or unloadable binary becomes one `native_addon_missing` error listing causes and fixes.
 */
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { LoomError } from '@loom/core'

/** A tensor of a safetensors file, as the addon's `load` expects it. */
export interface NativeTensor {
  readonly name: string
  /** Index into `files`. */
  readonly file: number
  /** Absolute byte offset of the data in the file. */
  readonly offset: number
  readonly nbytes: number
  /** 0 float32, 1 float16, 2 bfloat16. */
  readonly dtype: number
  readonly shape: readonly number[]
}

/** The `device` option: a device by name, or `auto` (cuda when usable, else cpu). */
export type NativeDeviceOption = 'auto' | 'cpu' | 'cuda'

/** Checked model facts in the addon's vocabulary (camelCase numbers and flags). */
export interface NativeModelConfig {
  readonly vocabSize: number
  readonly hiddenSize: number
  readonly intermediateSize: number
  readonly numLayers: number
  readonly numHeads: number
  readonly numKvHeads: number
  readonly headDim: number
  readonly maxPositions: number
  readonly rmsNormEps: number
  readonly ropeTheta: number
  /** 0 none, 1 linear, 2 llama3. */
  readonly ropeScaling: number
  readonly ropeFactor: number
  readonly ropeLowFreqFactor: number
  readonly ropeHighFreqFactor: number
  readonly ropeOriginalMaxPositions: number
  readonly tieWordEmbeddings: boolean
  readonly attentionBias: boolean
}

export interface NativeRuntimeOptions {
  readonly threads: number
  /** KV blocks per layer, or 0 to derive them from `kvCacheBytes` and the device's KV element size. */
  readonly kvBlocks: number
  /** KV cache budget in bytes, used when `kvBlocks` is 0. */
  readonly kvCacheBytes: number
  readonly kvBlockSize: number
  readonly maxBatchTokens: number
  readonly adapterSlots: number
  readonly maxLoraRank: number
  /** `auto` (as stored) or `int8` (quantised at load; cpu only). Absent: `auto`. */
  readonly weights?: 'auto' | 'int8'
}

export interface NativeLoraModule {
  readonly layer: number
  /** Index in `LORA_MODULES`. */
  readonly module: number
  readonly rank: number
  readonly scale: number
  /** `[rank, in]` */
  readonly a: Float32Array
  /** `[out, rank]` */
  readonly b: Float32Array
}

export interface NativeMedusaHead {
  readonly weights: readonly Float32Array[]
  readonly biases: readonly Float32Array[]
  readonly lmHead?: Float32Array
}

/** The packed step layout documented at `Runtime::Step` in native/src/binding.cc. */
/** A `StepBatch` as the addon's `step` reads it (layout: `Runtime::Step` in native/src/binding.cc). */
export interface NativePackedStep {
  readonly tokens: Int32Array
  readonly positions: Int32Array
  readonly rows: Int32Array
  readonly blockTables: Int32Array
  readonly masks: Uint8Array
  readonly scoreTargets: Int32Array
  readonly sampleFloats: Float64Array
  readonly sampleInts: Int32Array
  readonly sampleSeeds: BigUint64Array
  readonly penaltyStart: Int32Array
  readonly penalties: Int32Array
  readonly allowed: Uint32Array
  readonly terminated: Uint8Array
  readonly copies: Int32Array
  readonly copyData: Int32Array
  readonly maxTop: number
  readonly draftTopK: number
  /** Written by the step (see `StepOutput`). */
  readonly sampledTokens: Int32Array
  readonly sampledLogprobs: Float32Array
  readonly topIds: Int32Array
  readonly topLogprobs: Float32Array
  readonly scores: Float32Array
  readonly walkEnds: Int32Array
  readonly draftIds: Int32Array
}

/** One loaded model (the C++ `Runtime` class). Errors carry a Loom error `code`. */
export interface NativeRuntime {
  load(desc: {
    /** cpu | cuda | auto (auto: cuda when usable here, else cpu). */
    device: NativeDeviceOption
    config: NativeModelConfig
    options: NativeRuntimeOptions
    files: readonly string[]
    tensors: readonly NativeTensor[]
  }): Promise<{ dtype: string; device: 'cpu' | 'cuda'; threads: number; kvBlocks: number }>
  loadLora(slot: number, modules: readonly NativeLoraModule[]): Promise<void>
  /** `draftVocabulary`: ascending token ids the heads draft from (`MedusaWeights.draftVocabulary`). */
  loadMedusa(
    slot: number,
    numLayers: number,
    heads: readonly NativeMedusaHead[],
    draftVocabulary?: Int32Array,
  ): Promise<void>
  unload(slot: number): void
  step(packed: NativePackedStep): Promise<void>
  /** The same step on the calling (JS) thread, blocking it until done; throws what `step` rejects with. */
  stepNow(packed: NativePackedStep): void
  /** Steps run since the last call, their native wall time and the part spent in LoRA kernels; resets. */
  profile(): NativeStepProfile
  close(): void
}

/** Native step timing (see `NativeRuntime.profile`), milliseconds. */
export interface NativeStepProfile {
  readonly steps: number
  readonly stepMs: number
  readonly loraMs: number
}

export interface NativeAddon {
  readonly Runtime: new () => NativeRuntime
  /**
   * Memory read bandwidth: GB/s (1e9 B/s) of each of `repeats` multi-threaded sums over a buffer of
   * `bytes` (allocated and touched first, so page faults are not timed). For the benchmark's roofline.
   */
  measureReadBandwidth(bytes: number, threads: number, repeats: number): Promise<number[]>
  /** Devices compiled in, comma-separated: `cpu`, or `cpu,cuda` when the build found nvcc. */
  readonly devices: string
  /**
   * Whether the cuda device can run here: null when it can, else the `cuda_unavailable` code and a
   * message naming the cause (not compiled in, no driver, no GPU, no kernel image for this GPU)
   * and the fix. The first call probes the GPU (initialises CUDA); the answer is cached.
   */
  cudaStatus(): { code: string; message: string } | null
  /** The cpu kernels' vector path: `avx512`, or `avx2` (+ FMA + F16C). */
  readonly isa: 'avx512' | 'avx2'
}

const pluginDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
/** Where the build puts the addon. */
export const ADDON_PATH = path.join(pluginDir, 'build', 'Release', 'loom_native.node')

let cached: NativeAddon | undefined

/** Load the addon once per process. Throws `native_addon_missing` with causes and fixes. */
export function loadNative(): NativeAddon {
  if (cached) return cached
  const fix = 'run `node plugins/backend-cuda-native/scripts/build.mjs` (needs a C++17 compiler, make and python3)'
  if (!existsSync(ADDON_PATH)) {
    throw new LoomError('native_addon_missing', {
      detail:
        `${ADDON_PATH} does not exist. Likely causes: the package was installed with --ignore-scripts, ` +
        `or its postinstall build failed (no C++ compiler, make or python3). Fix: ${fix}.`,
    })
  }
  try {
    cached = createRequire(import.meta.url)(ADDON_PATH) as NativeAddon
    return cached
  } catch (err) {
    throw new LoomError(
      'native_addon_missing',
      {
        detail:
          `${ADDON_PATH} exists but cannot be loaded (${(err as Error).message}). Likely causes: it was built ` +
          `for another Node.js version or CPU (it needs AVX2/FMA/F16C), or a shared library is missing. Fix: ${fix}.`,
      },
      { cause: err },
    )
  }
}
