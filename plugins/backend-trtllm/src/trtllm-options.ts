/**
 * The plugin's `options:` schema (snake_case, as written in YAML) and its translation into the
 * addon's executor options. Defaults that changed between TensorRT-LLM releases are written out
 * here, so every release runs with the same behaviour.
 */
import { DEFAULT_MEDUSA_CHOICES, z } from '@loom/core'
import type { GuidedVocab } from './guided-vocab.ts'
import type { NativeExecutorOptions } from './native-api.ts'

const positiveInt = z.number().int().min(1)

/** Medusa's sparse tree: every path from the root listed (TensorRT-LLM's C++ runtime needs them all). */
const medusaChoices = z
  .array(z.array(z.number().int().min(0).max(1023)).min(1).max(64))
  .min(1)
  .max(1024)

export const trtllmOptionsSchema = z
  .strictObject({
    /** Directory of the built engine (`config.json` + `rank<N>.engine`); relative to the configuration file. */
    engine_dir: z.string().min(1),
    /** Requests the executor schedules together (default: the engine's `max_batch_size`). */
    max_batch_size: positiveInt.optional(),
    /** Tokens per executor iteration (default: the engine's `max_num_tokens`). */
    max_num_tokens: positiveInt.optional(),
    /** Requests waiting in the executor's queue beyond which new ones are refused with `overloaded` (default: unbounded). */
    max_queue_size: positiveInt.optional(),
    kv_cache: z
      .strictObject({
        /** Share of the GPU memory free after the engine loads that the KV cache takes. */
        free_gpu_memory_fraction: z.number().gt(0).max(1).default(0.9),
        /** Upper bound in tokens (the smaller of the two limits wins). */
        max_tokens: positiveInt.optional(),
        /** Reuse KV blocks of shared prefixes across requests (TensorRT-LLM's own default changed between releases). */
        enable_block_reuse: z.boolean().default(false),
      })
      .prefault({}),
    /** Split long prompts over several iterations (TensorRT-LLM's own default changed between releases). */
    enable_chunked_context: z.boolean().default(false),
    lora_cache: z
      .strictObject({
        /**
         * Host cache size in adapters of the engine's largest shape (every target module of every
         * layer at `max_lora_rank`). Overrides `host_mb`.
         */
        max_adapters: positiveInt.optional(),
        /** Host cache size in MiB, when `max_adapters` is not set (TensorRT-LLM's default: 1 GiB). */
        host_mb: z.number().positive().optional(),
        /** GPU cache as a share of the memory free after the engine and KV cache (TensorRT-LLM's default: 0.02). */
        device_fraction: z.number().gt(0).max(1).optional(),
        /**
         * Seconds a request waits for room when every cached adapter is in use by running requests
         * (TensorRT-LLM's "cache is full"), before it fails with `adapter_slots_full`.
         */
        wait_s: z.number().min(0).max(3600).default(30),
      })
      .prefault({}),
    /** Medusa tree for an engine built with Medusa heads (default: the native backend's tree, 25 candidates). */
    medusa_choices: medusaChoices.optional(),
    /** GPUs per pipeline stage; the engine must have been built with the same `--tp_size`. */
    tensor_parallel: positiveInt.max(64).default(1),
    /** Pipeline stages; the engine must have been built with the same `--pp_size`. */
    pipeline_parallel: positiveInt.max(64).default(1),
    /** CUDA device ids, one per rank on this node (default 0 … tp·pp − 1). */
    device_ids: z.array(z.number().int().min(0)).min(1).optional(),
    /**
     * TensorRT-LLM's `executorWorker`, which the executor spawns once per rank when tp·pp > 1
     * (orchestrator mode); relative to the configuration file. Default: found under `TRTLLM_ROOT` or
     * beside the linked `libtensorrt_llm.so`. Checked at startup; ignored on one GPU.
     */
    worker_path: z.string().min(1).optional(),
    /** Structured output through TensorRT-LLM's guided decoding (xgrammar); needs a build that has it. */
    guided_decoding: z.boolean().default(false),
    /**
     * Tests only: accept an addon built against the fake executor (no TensorRT-LLM). Without it,
     * such a build fails at startup.
     */
    allow_fake: z.boolean().default(false),
    /** The fake's knobs (tests only; ignored by TensorRT-LLM). */
    fake: z
      .strictObject({
        step_us: z.number().int().min(0).max(1_000_000).optional(),
        tokens_per_step: positiveInt.max(64).optional(),
      })
      .optional(),
  })
  .refine((o) => o.device_ids === undefined || o.device_ids.length === o.tensor_parallel * o.pipeline_parallel, {
    path: ['device_ids'],
    message: 'must list one device per rank (tensor_parallel × pipeline_parallel)',
  })

/** Validated plugin options. */
export type TrtllmOptions = z.output<typeof trtllmOptionsSchema>
/** What `new TrtllmBackend(…, options)` accepts: any subset with `engine_dir`, defaults filled in. */
export type TrtllmOptionsInput = z.input<typeof trtllmOptionsSchema>

/** tensor_parallel × pipeline_parallel: the GPUs (and TensorRT-LLM ranks) serving the engine. */
export function worldSize(options: Pick<TrtllmOptions, 'tensor_parallel' | 'pipeline_parallel'>): number {
  return options.tensor_parallel * options.pipeline_parallel
}

/**
 * The executor's communication mode: one GPU runs in this process; more run in orchestrator mode,
 * where this process (the server) stays the only one that takes requests and the executor spawns one
 * `executorWorker` per rank. Leader mode is never used: every MPI rank would run the whole server.
 */
export function parallelMode(
  options: Pick<TrtllmOptions, 'tensor_parallel' | 'pipeline_parallel'>,
): 'single' | 'orchestrator' {
  return worldSize(options) > 1 ? 'orchestrator' : 'single'
}

/** Engine facts the executor options depend on. */
export interface ExecutorSizing {
  /** Absolute engine directory. */
  readonly engineDir: string
  /** Module-layer rows of one largest adapter (target modules × layers), 0 without LoRA. */
  readonly moduleLayersPerAdapter: number
  /** The engine has Medusa heads. */
  readonly medusa: boolean
  /** The model's vocabulary (the fake generates tokens below it). */
  readonly vocabSize: number
  /** The resolved `executorWorker` (`resolveWorkerPath`), needed in orchestrator mode. */
  readonly workerPath?: string
}

/**
 * Translate validated options into the addon's executor options; `guided` is the tokenizer's
 * vocabulary for guided decoding (when `guided_decoding` is on).
 */
export function executorOptions(
  options: TrtllmOptions,
  sizing: ExecutorSizing,
  guided?: GuidedVocab,
): NativeExecutorOptions {
  const { kv_cache: kv, lora_cache: lora } = options
  const adapters = lora.max_adapters
  return {
    engineDir: sizing.engineDir,
    ...(options.max_batch_size !== undefined ? { maxBatchSize: options.max_batch_size } : {}),
    ...(options.max_num_tokens !== undefined ? { maxNumTokens: options.max_num_tokens } : {}),
    ...(options.max_queue_size !== undefined ? { maxQueueSize: options.max_queue_size } : {}),
    kvCacheFreeGpuMemoryFraction: kv.free_gpu_memory_fraction,
    ...(kv.max_tokens !== undefined ? { kvCacheMaxTokens: kv.max_tokens } : {}),
    enableKvCacheBlockReuse: kv.enable_block_reuse,
    enableChunkedContext: options.enable_chunked_context,
    ...(adapters !== undefined && sizing.moduleLayersPerAdapter > 0
      ? { loraCacheHostModuleLayers: adapters * sizing.moduleLayersPerAdapter }
      : {}),
    ...(lora.host_mb !== undefined ? { loraCacheHostBytes: Math.round(lora.host_mb * 1024 * 1024) } : {}),
    ...(lora.device_fraction !== undefined ? { loraCacheDevicePercent: lora.device_fraction } : {}),
    ...(sizing.medusa ? { medusaChoices: options.medusa_choices ?? DEFAULT_MEDUSA_CHOICES } : {}),
    tensorParallel: options.tensor_parallel,
    pipelineParallel: options.pipeline_parallel,
    ...(options.device_ids !== undefined ? { deviceIds: options.device_ids } : {}),
    parallelMode: parallelMode(options),
    ...(parallelMode(options) === 'orchestrator' && sizing.workerPath !== undefined
      ? { workerPath: sizing.workerPath }
      : {}),
    ...(guided !== undefined ? { guidedDecoding: guided } : {}),
    fake: {
      vocabSize: sizing.vocabSize,
      ...(options.fake?.step_us !== undefined ? { stepUs: options.fake.step_us } : {}),
      ...(options.fake?.tokens_per_step !== undefined ? { tokensPerStep: options.fake.tokens_per_step } : {}),
    },
  }
}
